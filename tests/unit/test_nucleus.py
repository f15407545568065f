"""The nucleus (top-p) both ways: the CPU's histogram selection and the sort used on other devices."""

import pytest
import torch

from grueflow.models.nucleus import _sorted_keep, top_p_keep, top_p_mask


def by_sorting(logits: torch.Tensor, top_p: float, top_k: int = 0, min_tokens_to_keep: int = 1) -> torch.Tensor:
    return _sorted_keep(logits, top_p, top_k, min_tokens_to_keep)


@pytest.mark.parametrize("keep", [top_p_keep, by_sorting], ids=["histogram", "sort"])
def test_top_p_keeps_the_smallest_set_reaching_p(keep):
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    assert keep(logits, 0.5).tolist() == [[True, False, False, False]]
    assert keep(logits, 0.79).tolist() == [[True, True, False, False]]
    assert keep(logits, 0.9).tolist() == [[True, True, True, False]]
    assert keep(logits, 1.0).tolist() == [[True, True, True, True]]
    assert keep(logits, 0.9, top_k=2).tolist() == [[True, True, False, False]]
    assert keep(logits, 0.01, min_tokens_to_keep=2).tolist() == [[True, True, False, False]]
    tied = torch.tensor([[0.4, 0.2, 0.2, 0.2]]).log()  # the nucleus holds 2 tokens; the tie fills in vocabulary order
    assert keep(tied, 0.5).tolist() == [[True, True, False, False]]
    assert keep(tied, 0.7).tolist() == [[True, True, True, False]]
    flat = torch.zeros(1, 10)  # one value everywhere: the histogram narrows to the last bit
    assert keep(flat, 0.25).tolist() == [[True] * 3 + [False] * 7]
    masked = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")]])
    assert keep(masked, 0.99).tolist() == [[True, False, True, False]]


@pytest.mark.parametrize("scale", [1e-3, 0.2, 3.0, 30.0], ids=["flat", "random-init", "trained", "peaked"])
@pytest.mark.parametrize("top_p,top_k,min_tokens_to_keep", [(0.9, 0, 1), (0.47, 0, 1), (0.95, 40, 1), (0.05, 0, 6)])
def test_the_histogram_finds_the_sorted_nucleus(scale, top_p, top_k, min_tokens_to_keep):
    """64 rows of 2,048 logits, from nearly flat (every boundary bin narrowed to its last digit) to
    one dominant token; and ties from integer logits. (A ``top_p`` that a tie's mass reaches exactly, as
    0.5 does for an even tie, is left to float rounding: both ways agree only to it.)"""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 2048, generator=generator) * scale
    expected = by_sorting(logits, top_p, top_k, min_tokens_to_keep)
    assert torch.equal(top_p_keep(logits, top_p, top_k, min_tokens_to_keep), expected)
    tied = torch.randint(0, 4, (64, 2048), generator=generator).float() * scale
    assert torch.equal(top_p_keep(tied, top_p, top_k, min_tokens_to_keep),
                       by_sorting(tied, top_p, top_k, min_tokens_to_keep))


def test_always_keep_adds_tokens_outside_the_nucleus():
    logits = torch.tensor([[5.0, 0.0, 0.0, -1.0]])
    assert top_p_keep(logits, 0.5, always_keep=[3]).tolist() == [[True, False, False, True]]


def test_top_p_mask_masks_the_scores_outside_the_logits_nucleus():
    logits = torch.tensor([[3.0, 2.0, -1.0, -2.0], [0.0, 0.0, 5.0, 0.0]])
    scores = torch.tensor([[0.5, 1.5, 2.5, 3.5], [1.0, 2.0, 3.0, 4.0]])
    keep, masked = top_p_mask(logits, scores, 0.9, always_keep=[3])
    assert keep.tolist() == [[True, True, False, True], [False, False, True, True]]
    inf = float("-inf")
    assert masked.tolist() == [[0.5, 1.5, inf, 3.5], [inf, inf, 3.0, 4.0]]
    assert scores[0, 2] == 2.5  # the scores themselves are left as they were


def test_a_nucleus_needs_a_positive_top_p_and_one_token():
    logits = torch.zeros(1, 4)
    with pytest.raises(ValueError, match="top_p=0"):
        top_p_keep(logits, 0.0)
    with pytest.raises(ValueError, match="min_tokens_to_keep=0"):
        top_p_mask(logits, logits, 0.5, min_tokens_to_keep=0)


def test_nan_logits_keep_no_token():
    nan = torch.full((1, 8), float("nan"))
    logits = torch.cat([nan, -nan, torch.zeros(1, 8)])  # NaNs of either sign, then a sound row
    assert top_p_keep(logits, 0.9).sum(-1).tolist() == [0, 0, 8]
