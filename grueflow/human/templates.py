"""Self-contained HTML templates for crowdsourcing platforms, with ``${column}`` placeholders.

Written for the MTurk requester site's layout editor (also accepted by platforms that use the same
``${column}`` convention): the platform wraps the layout in its own form and adds the Submit button;
each input's ``name`` becomes an ``Answer.<name>`` column of the results CSV, each placeholder an
``Input.<column>`` column. No external script, style sheet or font is loaded. The batch's CSV carries
HTML-escaped values (see :mod:`grueflow.human.batch`), so model text shows as text.
"""

from __future__ import annotations

import html

from grueflow.human.batch import Batch
from grueflow.human.criteria import SCALE_MAX, SCALE_MIN, Criterion

CHOICE_FIELD = "choice"  # the pairwise answer field: A, B or tie
CHOICES = ("A", "B", "tie")

_STYLE = """<style>
  .gf { font-family: sans-serif; max-width: 860px; margin: 0 auto; line-height: 1.45; }
  .gf .text { white-space: pre-wrap; border: 1px solid #bbb; border-radius: 4px; padding: 8px; margin: 4px 0 12px; }
  .gf .completion { background: #f4f8ff; }
  .gf fieldset { border: 1px solid #ddd; margin: 10px 0; }
  .gf .pair { display: flex; gap: 12px; } .gf .pair > div { flex: 1; }
  .gf label { margin-right: 14px; white-space: nowrap; }
</style>"""


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _likert_question(criterion: Criterion) -> str:
    radios = "\n".join(
        f'      <label><input type="radio" name="{_esc(criterion.id)}" value="{v}" required> {v}</label>'
        for v in range(SCALE_MIN, SCALE_MAX + 1))
    return (f"  <fieldset>\n    <legend><b>{_esc(criterion.id.capitalize())}</b>: {_esc(criterion.question)}</legend>\n"
            f"    <small>{SCALE_MIN} = {_esc(criterion.low)}, {SCALE_MAX} = {_esc(criterion.high)}</small><br>\n"
            f"{radios}\n  </fieldset>")


def likert_template(batch: Batch) -> str:
    """One item per page: the prompt, the completion, and a 1-5 scale per criterion (``Answer.<criterion>``)."""
    questions = "\n".join(_likert_question(c) for c in batch.criteria)
    return f"""<!-- grueflow Likert template ({_esc(batch.criteria_set)}): upload items.csv with it;
     columns ${{item_id}}, ${{prompt}}, ${{machine_completion}} -->
{_STYLE}
<div class="gf">
  <p>Read the prompt and the machine-written continuation, then rate the continuation on each question.</p>
  <input type="hidden" name="item_id" value="${{item_id}}">
  <h3>Prompt</h3>
  <div class="text">${{prompt}}</div>
  <h3>Continuation</h3>
  <div class="text completion">${{machine_completion}}</div>
{questions}
</div>
"""


def pairwise_template(batch: Batch) -> str:
    """Two blinded completions side by side and one question; the answer ``Answer.choice`` is A, B or tie."""
    column = batch.prompt_column
    radios = "\n".join(f'    <label><input type="radio" name="{CHOICE_FIELD}" value="{c}" required> '
                       f'{"Both equally good" if c == "tie" else c}</label>' for c in CHOICES)
    return f"""<!-- grueflow pairwise template ({_esc(batch.criteria_set)}): upload items.csv with it;
     the choice ids stay hidden -->
{_STYLE}
<div class="gf">
  <input type="hidden" name="item_id" value="${{item_id}}">
  <input type="hidden" name="choice_A_id" value="${{choice_A_id}}">
  <input type="hidden" name="choice_B_id" value="${{choice_B_id}}">
  <h3>{_esc(column.capitalize())}</h3>
  <div class="text">${{{column}}}</div>
  <div class="pair">
    <div><h3>A</h3><div class="text completion">${{choice_A}}</div></div>
    <div><h3>B</h3><div class="text completion">${{choice_B}}</div></div>
  </div>
  <fieldset>
    <legend><b>{_esc(batch.spec.pairwise_question)}</b></legend>
{radios}
  </fieldset>
</div>
"""


def platform_template(batch: Batch) -> str:
    return likert_template(batch) if batch.kind == "likert" else pairwise_template(batch)
