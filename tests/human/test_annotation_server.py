"""The annotation server refuses bad requests with a 4xx and a message, and never loses saved answers."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grueflow.human import batch as hb
from grueflow.human.annotate import MAX_BODY, build_server, main
from grueflow.human.answers import AnswerError, AnswerStore, annotator_key, read_answer_lines
from grueflow.io import DataError


def request(server, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, response.getheader("Content-Type"), data


def post(server, payload, **kw):
    status, _, data = request(server, "POST", "/api/answer", json.dumps(payload).encode(), **kw)
    return status, json.loads(data)


def test_bad_requests_are_refused_and_saved_answers_stay(likert_dir: Path, serve, tmp_path: Path) -> None:
    server = serve(likert_dir)
    first = hb.read_batch(likert_dir).items[0]["item_id"]
    status, state = post(server, {"item_id": first, "answer": {"coherence": 4, "sentiment": 2}})
    assert status == 200 and state["done"] == 1 and state["item"]["item_id"] != first
    saved = (tmp_path / "answers.jsonl").read_bytes()

    refused = [
        (request(server, "POST", "/api/answer", b"{not json"), 400, "not valid JSON"),
        (request(server, "POST", "/api/answer", b"[" * (MAX_BODY - 1)), 400, "not valid JSON: nested too deeply"),
        (request(server, "POST", "/api/answer", b'{"item_id": "\xff"}'), 400, "not valid JSON"),
        (request(server, "POST", "/api/answer", b"x" * (MAX_BODY + 1)), 413, f"the limit is {MAX_BODY}"),
        (request(server, "POST", "/api/answer", b"{}", {"Content-Type": "text/plain"}), 415, "send application/json"),
        (request(server, "POST", "/api/answer", b"{}", {"Host": "evil.example:80"}), 400, "Host 'evil.example:80' refused"),
        (request(server, "POST", "/api/answer", json.dumps({"item_id": "L99999", "answer": {}}).encode()), 404,
         "unknown item id 'L99999'"),
        (request(server, "POST", "/api/answer", json.dumps({"item_id": first, "answer": {"coherence": 9, "sentiment": 2}})
                 .encode()), 422, "score 9 for 'coherence' is out of range: give an integer 1..5"),
        (request(server, "POST", "/api/answer", json.dumps({"item_id": first, "answer": {"coherence": 3}}).encode()),
         422, "scores exactly the criteria ['coherence', 'sentiment']"),
        (request(server, "POST", "/api/answer", json.dumps({"item_id": first, "answer": {"coherence": True,
                                                                                       "sentiment": 2}}).encode()),
         422, "out of range"),
        (request(server, "POST", "/api/answer", json.dumps([1, 2]).encode()), 400, "exactly item_id and answer"),
        (request(server, "POST", "/api/answer", json.dumps({"item_id": first, "answer": {"coherence": 3, "sentiment": 3},
                                                              "annotator": "mallory"}).encode()), 400,
         "exactly item_id and answer"),
        (request(server, "GET", "/items.jsonl"), 404, "no such page"),
        (request(server, "POST", "/api/answer", f'{{"item_id": "{first}", "answer": {{"coherence": 4, "sentiment": 2, '
                 f'"sentiment": 5}}}}'.encode()), 400, "the body names a key twice (the key 'sentiment' is written "
                                                       "twice in one object); send each key once"),
    ]
    for (status, content_type, data), want_status, want_message in refused:
        assert status == want_status, data
        assert content_type.startswith("application/json")
        assert want_message in json.loads(data)["error"]
    assert (tmp_path / "answers.jsonl").read_bytes() == saved
    status, state = post(server, {"item_id": first, "answer": {"coherence": 5, "sentiment": 1}})
    assert status == 200  # the server still works after the refusals


def test_page_and_state_never_reveal_the_key_or_the_method(tmp_path: Path, serve) -> None:
    batch, key = hb.pairwise_batch(("ppo", [hb.Prediction("s1", "p", "x")]), ("nlpo", [hb.Prediction("s1", "p", "y")]),
                                   "commongen", seed=0)
    hb.write_batch(batch, tmp_path / "pw", key, tmp_path / "pw.key.json")
    server = serve(tmp_path / "pw", "bob")
    for path in ("/", "/api/state", "/page.js"):
        status, _, data = request(server, "GET", path)
        text = data.decode()
        assert status == 200 and "ppo" not in text and "nlpo" not in text
        assert not any(opaque in text for opaque in key)
    _, headers_type, _ = request(server, "GET", "/")
    assert headers_type.startswith("text/html")


def test_the_page_escapes_the_batch_name_server_side(likert_dir: Path, serve, tmp_path: Path) -> None:
    odd = likert_dir.rename(tmp_path / "<b onmouseover=x>batch")
    status, _, data = request(serve(odd), "GET", "/")
    assert status == 200 and "&lt;b onmouseover=x&gt;batch" in data.decode() and "<b onmouseover" not in data.decode()


def test_several_annotators_share_one_file_and_resume(likert_dir: Path, serve, tmp_path: Path) -> None:
    items = [i["item_id"] for i in hb.read_batch(likert_dir).items]
    alice, bob = serve(likert_dir, "alice"), serve(likert_dir, "bob")
    post(alice, {"item_id": items[0], "answer": {"coherence": 1, "sentiment": 1}})
    post(alice, {"item_id": items[1], "answer": {"coherence": 2, "sentiment": 2}})
    _, state = post(bob, {"item_id": items[0], "answer": {"coherence": 5, "sentiment": 5}})
    assert (state["annotator"], state["done"], state["item"]["item_id"]) == ("bob", 1, items[1])
    alice_again = serve(likert_dir, "alice")  # a restart resumes at alice's first unanswered item
    state = json.loads(request(alice_again, "GET", "/api/state")[2])
    assert (state["done"], state["item"]["item_id"]) == (2, items[2])
    assert [(r["annotator"], r["item_id"], r["answer"]) for r in read_answer_lines(tmp_path / "answers.jsonl")] == [
        ("alice", items[0], {"coherence": 1, "sentiment": 1}), ("alice", items[1], {"coherence": 2, "sentiment": 2}),
        ("bob", items[0], {"coherence": 5, "sentiment": 5})]


@pytest.mark.parametrize("name", ["alice", "Alice", "ALICE", " alice ", "alice\u00a0",
                                  "\uff21\uff4c\uff49\uff43\uff45"])  # no-break space; full-width letters
def test_annotator_key_folds_case_spacing_and_unicode_forms(name: str) -> None:
    assert annotator_key(name) == "alice"


def test_a_name_the_answers_file_holds_in_another_letter_case_is_refused(likert_dir: Path, serve, tmp_path: Path,
                                                                         capsys) -> None:
    """One person who starts the page again as 'Alice' (was 'alice') answered every item again as a second
    annotator; the page keeps one name per person in its file, at the start and at each answer."""
    answers = tmp_path / "answers.jsonl"
    items = [i["item_id"] for i in hb.read_batch(likert_dir).items]
    post(serve(likert_dir, "alice"), {"item_id": items[0], "answer": {"coherence": 4, "sentiment": 2}})
    saved = answers.read_bytes()
    for name in ("Alice", "ALICE"):
        with pytest.raises(AnswerError) as err:
            build_server(likert_dir, name, answers, port=0)
        assert str(err.value) == (
            f"annotator {name!r}: this answers file knows this annotator as 'alice'; use that name, as one person's "
            f"answers go under one name ({answers} line 1 has it), or, if you are someone else, a name the file "
            f"does not hold")
    assert main([str(likert_dir), "--annotator", "Alice", "--answers", str(answers), "--port", "0"]) == 2
    assert "this answers file knows this annotator as 'alice'; use that name" in capsys.readouterr().err
    assert answers.read_bytes() == saved
    # a second page that started before the other spelling was written is refused at its first answer (409)
    late = serve(likert_dir, "Bob")
    AnswerStore(answers, hb.read_batch(likert_dir)).append("bob", items[1], {"coherence": 1, "sentiment": 1})
    saved = answers.read_bytes()
    status, body = post(late, {"item_id": items[2], "answer": {"coherence": 3, "sentiment": 3}})
    assert status == 409 and body["error"].startswith("annotator 'Bob': this answers file knows this annotator as "
                                                      "'bob'; use that name")
    assert answers.read_bytes() == saved
    state = json.loads(request(serve(likert_dir, "alice"), "GET", "/api/state")[2])  # the name the file has resumes
    assert (state["annotator"], state["done"]) == ("alice", 1)
    status, _ = post(serve(likert_dir, "alice2"), {"item_id": items[0], "answer": {"coherence": 2, "sentiment": 2}})
    assert status == 200


def test_an_interrupted_write_is_cut_and_saved_lines_survive(likert_dir: Path, tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "answers.jsonl", hb.read_batch(likert_dir))
    items = [i["item_id"] for i in store.batch.items]
    store.append("alice", items[0], {"coherence": 3, "sentiment": 4})
    with open(store.path, "ab") as handle:  # what a crash in the middle of a write leaves
        handle.write(b'{"annotator": "alice", "item_id": "L0')
    assert [r["item_id"] for r in store.records()] == [items[0]]  # readers skip the unfinished line
    store.append("alice", items[1], {"coherence": 2, "sentiment": 5})
    lines = store.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    assert [json.loads(line)["item_id"] for line in lines[:2]] == items[:2]
    # the fragment is moved aside, not deleted: it may be notes typed in by hand
    assert (tmp_path / "answers.jsonl.cut").read_bytes() == b'{"annotator": "alice", "item_id": "L0\n'


def test_a_whole_last_answer_without_its_newline_is_kept_and_ended(likert_dir: Path, tmp_path: Path) -> None:
    """A file edited or concatenated by hand may lose its final newline: a whole JSON object there is an answer."""
    store = AnswerStore(tmp_path / "answers.jsonl", hb.read_batch(likert_dir))
    items = [i["item_id"] for i in store.batch.items]
    store.append("alice", items[0], {"coherence": 3, "sentiment": 4})
    store.path.write_bytes(store.path.read_bytes().rstrip(b"\n"))
    assert [r["item_id"] for r in store.records()] == [items[0]]
    assert [r["item_id"] for r in read_answer_lines(store.path)] == [items[0]]
    store.append("alice", items[1], {"coherence": 2, "sentiment": 5})
    lines = store.path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(line)["item_id"] for line in lines[:-1]] == items[:2]


def test_the_page_keeps_lines_ended_by_a_lone_carriage_return(likert_dir: Path, tmp_path: Path) -> None:
    """A file with classic Mac line ends read as one unfinished line: the page showed nothing answered and its next
    append moved every answer to answers.jsonl.cut."""
    store = AnswerStore(tmp_path / "answers.jsonl", hb.read_batch(likert_dir))
    items = [i["item_id"] for i in store.batch.items]
    store.append("alice", items[0], {"coherence": 3, "sentiment": 4})
    store.append("alice", items[1], {"coherence": 2, "sentiment": 5})
    store.path.write_bytes(store.path.read_bytes().replace(b"\n", b"\r").rstrip(b"\r"))
    assert [r["item_id"] for r in store.records()] == items[:2]
    store.append("alice", items[2], {"coherence": 1, "sentiment": 1})
    assert not (tmp_path / "answers.jsonl.cut").exists()
    assert [r["item_id"] for r in read_answer_lines(store.path)] == items[:3]


def test_a_failed_write_leaves_no_part_of_its_line(likert_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A short write (a full disk) left half an answer line, which a later import could not tell from a hand edit."""
    store = AnswerStore(tmp_path / "answers.jsonl", hb.read_batch(likert_dir))
    items = [i["item_id"] for i in store.batch.items]
    store.append("alice", items[0], {"coherence": 3, "sentiment": 4})
    saved = store.path.read_bytes()
    write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: write(fd, data[:10]))
    with pytest.raises(OSError, match=r"answers\.jsonl: wrote 10 of \d+ bytes"):
        store.append("alice", items[1], {"coherence": 2, "sentiment": 5})
    assert store.path.read_bytes() == saved


def test_a_saved_answer_after_a_byte_order_mark_is_an_answer(likert_dir: Path, tmp_path: Path) -> None:
    """An answers file re-saved by Notepad (a UTF-8 BOM) with one answer and no final newline was read as an
    interrupted write: the page showed nothing answered and moved the answer to answers.jsonl.cut on the next
    append, which the import never reads."""
    store = AnswerStore(tmp_path / "answers.jsonl", hb.read_batch(likert_dir))
    items = [i["item_id"] for i in store.batch.items]
    store.append("alice", items[0], {"coherence": 3, "sentiment": 4})
    store.path.write_bytes(b"\xef\xbb\xbf" + store.path.read_bytes().rstrip(b"\n"))
    assert [r["item_id"] for r in read_answer_lines(store.path)] == [items[0]]
    assert store.latest("alice") == {items[0]: {"coherence": 3, "sentiment": 4}}
    store.append("alice", items[1], {"coherence": 2, "sentiment": 5})
    assert not (tmp_path / "answers.jsonl.cut").exists()
    assert [r["item_id"] for r in read_answer_lines(store.path)] == items[:2]


def test_an_answer_line_that_names_a_key_twice_is_refused(likert_dir: Path, tmp_path: Path) -> None:
    """JSON keeps the last of two "answer" keys: the import took one of two answers without a word."""
    path = tmp_path / "answers.jsonl"
    item = hb.read_batch(likert_dir).items[0]["item_id"]
    path.write_text(f'{{"annotator": "alice", "item_id": "{item}", "answer": {{"coherence": 4, "sentiment": 3}}, '
                    f'"answer": {{"coherence": 1, "sentiment": 1}}}}\n')
    with pytest.raises(DataError, match=r"answers.jsonl: line 1: the key 'answer' is written twice in one object; an "
                                        r"answer line names each key once: remove the other one"):
        read_answer_lines(path)


def test_cli_refuses_a_bad_batch_and_a_bad_name(tmp_path: Path, likert_dir: Path) -> None:
    assert main([str(tmp_path / "nowhere"), "--annotator", "alice", "--answers", str(tmp_path / "a.jsonl")]) == 2
    result = subprocess.run([sys.executable, "-m", "grueflow.human.annotate", str(likert_dir), "--annotator",
                             "<b>x</b>", "--answers", str(tmp_path / "a.jsonl"), "--port", "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "annotator '<b>x</b>' is not a valid name" in result.stderr


def test_cli_refuses_a_port_out_of_range_and_a_folder_for_answers(tmp_path: Path, likert_dir: Path, capsys) -> None:
    """--port 99999 ended in bind()'s OverflowError; --answers /tmp blamed the port."""
    for args, expect in ((["--answers", str(tmp_path / "a.jsonl"), "--port", "99999"],
                          "--port 99999 is not a port; give 0 to 65535"),
                         (["--port", "0", "--answers", str(tmp_path)], f"--answers {tmp_path} is a folder")):
        with pytest.raises(SystemExit) as exit_:
            main([str(likert_dir), "--annotator", "alice", *args])
        assert exit_.value.code == 2 and expect in capsys.readouterr().err


def test_the_answers_path_a_refusal_suggests_is_the_one_the_table_imports(tmp_path: Path, likert_dir: Path,
                                                                          capsys) -> None:
    """The advice was data/human/<batch>/answers.jsonl, without the task folder: the table did not import it."""
    batch = tmp_path / "results" / "human" / "imdb" / "batches" / "likert_seed0"
    batch.parent.mkdir(parents=True)
    likert_dir.rename(batch)
    with pytest.raises(SystemExit) as exit_:
        main([str(batch), "--annotator", "alice", "--answers", str(tmp_path), "--port", "0"])
    assert exit_.value.code == 2
    assert "is a folder; give the answers file, e.g. data/human/imdb/likert_seed0/answers.jsonl" in \
        capsys.readouterr().err
    assert main([str(batch), "--annotator", "alice", "--answers", str(batch / "answers.jsonl"), "--port", "0"]) == 2
    assert "keep answers elsewhere, e.g. data/human/imdb/likert_seed0/answers.jsonl" in capsys.readouterr().err
    elsewhere = tmp_path / "copy"  # a batch folder outside the export's layout: its task is not known
    batch.rename(elsewhere)
    assert main([str(elsewhere), "--annotator", "alice", "--answers", str(elsewhere / "a.jsonl"), "--port", "0"]) == 2
    assert "keep answers elsewhere, e.g. data/human/<task>/copy/answers.jsonl" in capsys.readouterr().err


def test_cli_refuses_another_batchs_answers_file_and_one_inside_a_stage_output(tmp_path: Path, likert_dir: Path,
                                                                                 capsys) -> None:
    """Batch A's page appended into batch B's answers file (B's import then failed), and into an evaluate folder."""
    other = tmp_path / "other"
    preds = {"a2c": [hb.Prediction(f"t{i}", f"another prompt {i}", f"another reply {i}") for i in range(3)]}
    hb.write_batch(hb.likert_batch(preds, "imdb", seed=1), other)
    answers = tmp_path / "b_answers.jsonl"
    AnswerStore(answers, hb.read_batch(other)).append("bob", hb.read_batch(other).items[0]["item_id"],
                                                       {"coherence": 3, "sentiment": 3})
    saved = answers.read_bytes()
    assert main([str(likert_dir), "--annotator", "alice", "--answers", str(answers), "--port", "0"]) == 2
    assert "holds answers to item" in capsys.readouterr().err and answers.read_bytes() == saved
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "stage.json").write_text("{}")
    assert main([str(likert_dir), "--annotator", "alice", "--answers", str(tmp_path / "eval" / "a.jsonl"),
                 "--port", "0"]) == 2
    assert f"lies inside {tmp_path / 'eval'}, the output folder of stage" in capsys.readouterr().err


def test_an_answer_the_file_cannot_take_is_a_500_saying_why(likert_dir: Path, serve, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that failed (a full disk, a file made read-only while serving) left the request without a response
    and a traceback on the server."""
    server = serve(likert_dir)
    first = hb.read_batch(likert_dir).items[0]["item_id"]

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(server.store, "append", full)
    status, content_type, data = request(server, "POST", "/api/answer", json.dumps(
        {"item_id": first, "answer": {"coherence": 4, "sentiment": 2}}).encode())
    assert status == 500 and "not saved: the answers file cannot be written" in json.loads(data)["error"]
    assert "No space left on device" in json.loads(data)["error"]


def test_an_idle_connection_is_closed_after_the_request_timeout(likert_dir: Path, serve) -> None:
    """A client that connects and sends nothing is dropped after request_timeout, freeing its thread."""
    import socket
    import time

    server = serve(likert_dir)
    server.request_timeout = 0.5
    with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=10) as idle:
        started = time.monotonic()
        assert idle.recv(1) == b""  # the server closes the connection: end of stream
        assert time.monotonic() - started < 5
    state = json.loads(request(server, "GET", "/api/state")[2])  # and it still serves others
    assert state["annotator"] == "alice"


def test_cli_refuses_answers_that_are_a_fifo_or_a_device(tmp_path: Path, likert_dir: Path, capsys) -> None:
    """--answers a FIFO hung before the page served, without a word; a link to /dev/zero read until memory ran
    out."""
    os.mkfifo(tmp_path / "fifo.jsonl")
    (tmp_path / "zero.jsonl").symlink_to("/dev/zero")
    for name in ("fifo.jsonl", "zero.jsonl"):
        assert main([str(likert_dir), "--annotator", "alice", "--answers", str(tmp_path / name), "--port", "0"]) == 2
        assert (f"error: answers file {tmp_path / name} is not a regular file (a FIFO, a socket or a device); give "
                f"the page's .jsonl\n") in capsys.readouterr().err


def test_answers_not_named_jsonl_are_refused_before_the_page_serves(tmp_path: Path, likert_dir: Path) -> None:
    """--answers a.csv was written JSON lines, which the import then read as a platform's results CSV, whose
    columns were fragments of JSON."""
    with pytest.raises(DataError, match=rf"^--answers {re.escape(str(tmp_path / 'a.csv'))}: the page writes JSON "
                                        r"lines, which the import reads from a \.jsonl file; name it so, e\.g\. "
                                        r"data/human/<task>/batch/answers\.jsonl$"):
        build_server(likert_dir, "alice", tmp_path / "a.csv", port=0)
    assert not (tmp_path / "a.csv").exists()


def test_answers_in_another_batchs_answers_folder_are_refused_naming_it(tmp_path: Path) -> None:
    """The page took --answers in the answers folder of another batch of the task (a slip between two folders), and
    the import of that batch then blamed a re-export; a file above the batch folders was taken and never imported."""
    batch = hb.likert_batch({"ppo": [hb.Prediction(f"s{i}", f"p{i}", f"g{i}") for i in range(3)]}, "imdb", seed=0)
    batch_dir = tmp_path / "results" / "human" / "sentiment" / "batches" / "likert_seed0"
    hb.write_batch(batch, batch_dir)
    human = tmp_path / "data" / "human"
    home = "data/human/sentiment/likert_seed0/answers.jsonl"
    cases = {"sentiment/ppo_vs_zero_shot_seed0/alice.jsonl":
             f"{human / 'sentiment' / 'ppo_vs_zero_shot_seed0'}/, the answers folder of batch ppo_vs_zero_shot_seed0, "
             f"which the import reads as its answers",
             "concepts/likert_seed0/alice.jsonl":
             f"{human / 'concepts' / 'likert_seed0'}/, the answers folder of task concepts's batch likert_seed0, "
             f"which the import reads as its answers",
             "sentiment/answers.jsonl":
             f"{human / 'sentiment'}/, where the import reads no answers (it reads {human}/<task>/<batch>/, the folder "
             f"of the batch they answer)",
             "sentiment/likert_seed0/old/alice.jsonl":
             f"{human / 'sentiment' / 'likert_seed0' / 'old'}/, where the import reads no answers"}
    for rest, found in cases.items():
        answers = human / rest
        with pytest.raises(DataError) as err:
            build_server(batch_dir, "alice", answers, port=0)
        assert str(err.value).startswith(f"--answers {answers} lies in {found}")
        assert str(err.value).endswith(f"; this page serves batch likert_seed0, whose answers go in {home}: give that "
                                       f"path")
        assert not answers.exists()
    for answers in (human / "sentiment" / "likert_seed0" / "alice.jsonl", tmp_path / "elsewhere" / "alice.jsonl"):
        server = build_server(batch_dir, "alice", answers, port=0)
        server.server_close()


def test_a_page_whose_batch_is_exported_again_refuses_to_save_and_says_to_restart(likert_dir: Path, serve,
                                                                                   tmp_path: Path, caplog) -> None:
    """A running page kept saving answers to a batch the pipeline had replaced (every import then refused them),
    and nobody at the page was told."""
    server = serve(likert_dir)
    old = hb.read_batch(likert_dir)
    first, second = old.items[0]["item_id"], old.items[1]["item_id"]
    assert post(server, {"item_id": first, "answer": {"coherence": 4, "sentiment": 2}})[0] == 200
    saved = (tmp_path / "answers.jsonl").read_bytes()
    original = {f: (likert_dir / f).read_bytes() for f in (hb.MANIFEST, hb.ITEMS, hb.UPLOAD, hb.TEMPLATE)}
    new = hb.likert_batch({"ppo": [hb.Prediction(f"s{i}", f"prompt {i}", f"other {i}") for i in range(3)]}, "imdb", 0)
    hb.write_batch(new, likert_dir)  # a re-export after an upstream change: another batch in the same folder
    message = (f"the batch {likert_dir.name} was exported again since this page started (the folder now holds batch "
               f"{new.tag}; this page serves batch {old.tag}), and answers to the old batch would not be imported; "
               f"nothing was saved: whoever runs this page, stop it and start grueflow annotate again, then reload "
               f"(the answers saved so far stay in {tmp_path / 'answers.jsonl'})")
    assert post(server, {"item_id": second, "answer": {"coherence": 3, "sentiment": 3}}) == (409, {"error": message})
    status, _, data = request(server, "GET", "/api/state")
    assert (status, json.loads(data)) == (409, {"error": message})
    assert (tmp_path / "answers.jsonl").read_bytes() == saved
    assert message in caplog.text
    # the same batch written again (a seeded re-export of the same predictions) is the same batch
    for name, data in original.items():
        (likert_dir / name).write_bytes(data)
    assert post(server, {"item_id": second, "answer": {"coherence": 3, "sentiment": 3}})[0] == 200


@pytest.mark.parametrize("link", ["hardlink", "symlink", "symlink_elsewhere"])
def test_an_answers_file_linked_into_dvcs_cache_is_refused_before_any_answer(likert_dir: Path, serve, tmp_path: Path,
                                                                             capsys, link: str) -> None:
    """Answers `dvc add`ed with cache.type hardlink or symlink: the page appended each answer in place, into DVC's
    cached object of the committed version, which then held other bytes than its md5 names, with no word."""
    answers = tmp_path / "answers.jsonl"
    items = [i["item_id"] for i in hb.read_batch(likert_dir).items]
    started = serve(likert_dir, "carol")  # a page that started before the file was linked
    assert post(serve(likert_dir), {"item_id": items[0], "answer": {"coherence": 4, "sentiment": 2}})[0] == 200
    saved = answers.read_bytes()
    cache = tmp_path / ".dvc" / "cache" if link != "symlink_elsewhere" else tmp_path / "annex"
    target = cache / "files" / "md5" / "ab" / "cdef0123456789abcdef0123456789"
    target.parent.mkdir(parents=True)
    answers.rename(target)
    target.chmod(0o444)
    if link == "hardlink":
        os.link(target, answers)
    else:
        answers.symlink_to(target)
    copy = tmp_path / ".answers.jsonl.copy"
    what = {"hardlink": "one file with 1 other path(s) (a hard link: DVC's cache with cache.type hardlink, where it "
                        "was `dvc add`ed, or a copy made with cp -al)",
            "symlink": f"a link into DVC's cache ({target}: `dvc add` with cache.type symlink)",
            "symlink_elsewhere": f"a link to {target}"}[link]
    changes = {"hardlink": "the other path(s) (DVC's cached copy of the committed version, kept under the md5 of its "
                           "bytes)",
               "symlink": "DVC's cached copy of the committed version, kept under the md5 of its bytes",
               "symlink_elsewhere": "the file it names"}[link]
    message = (f"{answers} is {what}: the page appends each answer to the file in place, so it would also "
               f"change {changes}; make it a file of its own first: run `dvc unprotect {answers}` (and `dvc add` it "
               f"again when the answers are in), or copy it to a plain file in its place (cp {answers} {copy} && "
               f"chmod u+w {copy} && mv {copy} {answers}); no answer was saved")
    with pytest.raises(DataError) as refused:
        build_server(likert_dir, "bob", answers, port=0)
    assert str(refused.value) == f"--answers {message}"
    assert main([str(likert_dir), "--annotator", "bob", "--answers", str(answers), "--port", "0"]) == 2
    assert capsys.readouterr().err == f"error: --answers {message}\n"
    status, body = post(started, {"item_id": items[1], "answer": {"coherence": 1, "sentiment": 1}})
    assert (status, body) == (409, {"error": message})
    with pytest.raises(AnswerError) as refused:
        AnswerStore(answers, hb.read_batch(likert_dir)).append("bob", items[1], {"coherence": 1, "sentiment": 1})
    assert (str(refused.value), refused.value.status) == (message, 409)
    assert target.read_bytes() == saved and not (tmp_path / "answers.jsonl.cut").exists()
