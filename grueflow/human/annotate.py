"""Serve a batch for annotation on 127.0.0.1: ``python -m grueflow.human.annotate BATCH_DIR --annotator NAME``.

One item at a time with keyboard shortcuts and progress; each answer is appended to the answers file
(``--answers``, kept outside the batch folder, under ``data/human/<task>/<batch>/``, since a re-export replaces
the batch folder) as it is given (see :mod:`grueflow.human.answers`), and a reload
or a restart resumes at the annotator's first unanswered item. Several annotators share a batch: each
runs the page under their own name (on their own port), all writing the same answers file.

Routes: ``GET /`` (the page), ``GET /page.js``, ``GET /page.css``, ``GET /api/state`` (progress and the
current item), ``POST /api/answer`` (``{"item_id": ..., "answer": {...}}``, JSON, at most
:data:`MAX_BODY` bytes). A refused request gets a 4xx status and ``{"error": message}``; it saves nothing.
Requests whose ``Host`` is not this server's loopback address are refused (DNS rebinding), and a POST
must be ``application/json``, which a cross-site form cannot send without a CORS preflight this server
never grants.

The page serves the batch as it was when the server started. A pipeline run that exports the batch again (an
upstream change) replaces the folder with another batch, and answers to the old one would be refused by every
import: from then on ``/api/state`` and ``/api/answer`` answer 409 with a message the page shows (restart the
page), and save nothing (:class:`BatchWatch`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional, Sequence

from grueflow import io
from grueflow.config import ConfigError
from grueflow.human.answers import AnswerError, AnswerStore, check_annotator, shared_file
from grueflow.human.batch import ITEMS, Batch, prompt_of, read_batch, tag_of
from grueflow.human.criteria import SCALE_MAX, SCALE_MIN
from grueflow.human.layout import LEFTOVER_SUFFIX, PAGE_SUFFIX
from grueflow.human.page import CSS, SCRIPT, shell
from grueflow.stage import GivenOnce, check_writable, inside_output

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_BODY = 16 * 1024  # bytes; an answer is well under 1 KiB
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


REQUEST_TIMEOUT_S = 60.0


class BatchWatch:
    """Whether a batch folder still holds the batch a page started with: the bytes of its ``items.jsonl`` (the
    batch's identity, :mod:`grueflow.human.batch`), compared by digest whenever the file's (inode, size, mtime)
    differ from those last seen, so an unchanged folder costs one ``stat`` per request. The same batch written
    again (a forced rerun, a seeded re-export of the same predictions) is the same batch."""

    def __init__(self, folder: Path) -> None:
        self.items = Path(folder) / ITEMS
        self._lock = threading.Lock()
        self._seen = self._stat()
        self._digest = io.sha256_bytes(self.items)

    def _stat(self) -> Optional[tuple[int, int, int]]:
        try:
            found = self.items.stat()
        except OSError:
            return None
        return found.st_ino, found.st_size, found.st_mtime_ns

    def replaced(self) -> Optional[str]:
        """None while the folder holds the batch; else what it holds now: ``batch <tag>``, or why none."""
        with self._lock:
            seen = self._stat()
            if seen is not None and seen == self._seen:
                return None
            try:
                same = seen is not None and io.sha256_bytes(self.items) == self._digest
            except OSError:
                same = False
            if same:
                self._seen = seen
                return None
        return _held(self.items)


def _held(items: Path) -> str:
    """What the ``items.jsonl`` at ``items`` holds now, as the refusal says it: ``batch <tag>``, or why none."""
    try:
        with open(items, encoding="utf-8") as handle:
            first = json.loads(handle.readline())
        tag = tag_of(first["item_id"]) if isinstance(first, dict) and isinstance(first.get("item_id"), str) else None
    except FileNotFoundError:
        return "no batch (it is being exported again, or was deleted)"
    except (OSError, ValueError):
        return "a batch being written"
    return f"batch {tag}" if tag else "another batch"


class AnnotationServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its batch, answers file and annotator.

    ``request_timeout`` (seconds) bounds how long a connection may sit idle in a read or write: a client that
    opens a socket and sends nothing cannot hold a thread for ever.
    """

    daemon_threads = True

    def __init__(self, batch: Batch, batch_name: str, store: AnswerStore, annotator: str, port: int,
                 request_timeout: float = REQUEST_TIMEOUT_S, watch: Optional[BatchWatch] = None) -> None:
        self.batch, self.batch_name, self.store, self.annotator = batch, batch_name, store, check_annotator(annotator)
        self.request_timeout = request_timeout
        self.watch = watch
        super().__init__((HOST, port), _Handler)

    def replaced(self) -> Optional[str]:
        """Why the page can no longer save answers to its batch, logged once per request, or None: the batch folder
        no longer holds the batch the page started with (:class:`BatchWatch`; never for a server without one)."""
        now = self.watch.replaced() if self.watch is not None else None
        if now is None:
            return None
        serves = self.batch.tag or "of no tag"
        message = (f"the batch {self.batch_name} was exported again since this page started (the folder now holds "
                   f"{now}; this page serves batch {serves}), and answers to the old batch would not be imported; "
                   f"nothing was saved: whoever runs this page, stop it and start grueflow annotate again, then reload "
                   f"(the answers saved so far stay in {self.store.path})")
        log.warning("%s", message)
        return message

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"

    def state(self) -> dict[str, Any]:
        """What the page shows: progress and the annotator's first unanswered item (model text as plain strings)."""
        batch = self.batch
        answered = self.store.latest(self.annotator)
        row = next((r for r in batch.items if r["item_id"] not in answered), None)
        item = None
        if row is not None:
            item = {"item_id": row["item_id"], "prompt": prompt_of(batch, row)}
            if batch.kind == "likert":
                item["machine_completion"] = row["machine_completion"]
            else:
                item.update(choice_A=row["choice_A"], choice_B=row["choice_B"])
        return {"annotator": self.annotator, "kind": batch.kind, "total": len(batch.items), "done": len(answered),
                "item": item,
                "scale": [SCALE_MIN, SCALE_MAX], "question": batch.spec.pairwise_question,
                "criteria": [{"id": c.id, "question": c.question, "low": c.low, "high": c.high} for c in batch.criteria]}


class _Handler(BaseHTTPRequestHandler):
    server: AnnotationServer
    server_version = "grueflow-annotate"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.request_timeout  # StreamRequestHandler sets it on the socket
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.info("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _host_ok(self) -> bool:
        port = self.server.server_address[1]
        if self.headers.get("Host") in {f"{HOST}:{port}", f"localhost:{port}"}:
            return True
        self._error(HTTPStatus.BAD_REQUEST, f"Host {self.headers.get('Host')!r} refused; open {self.server.url}")
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not self._host_ok():
            return
        path = self.path.split("?", 1)[0]
        if path == "/":
            page = shell(self.server.batch, self.server.annotator, self.server.batch_name)
            self._send(HTTPStatus.OK, page.encode("utf-8"), "text/html; charset=utf-8")
        elif path == "/page.js":
            self._send(HTTPStatus.OK, SCRIPT.encode("utf-8"), "text/javascript; charset=utf-8")
        elif path == "/page.css":
            self._send(HTTPStatus.OK, CSS.encode("utf-8"), "text/css; charset=utf-8")
        elif path == "/api/state":
            replaced = self.server.replaced()
            if replaced is not None:
                self._error(HTTPStatus.CONFLICT, replaced)
                return
            self._json(HTTPStatus.OK, self.server.state())
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such page {path!r}; the page is at /")

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            return
        if self.path != "/api/answer":
            self._error(HTTPStatus.NOT_FOUND, f"cannot POST to {self.path!r}; answers go to /api/answer")
            return
        payload = self._read_json()
        if payload is None:
            return
        if not isinstance(payload, dict) or set(payload) != {"item_id", "answer"}:
            keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
            self._error(HTTPStatus.BAD_REQUEST, f"the body is a JSON object with exactly item_id and answer, got {keys}")
            return
        replaced = self.server.replaced()
        if replaced is not None:
            self._error(HTTPStatus.CONFLICT, replaced)
            return
        try:
            self.server.store.append(self.server.annotator, payload["item_id"], payload["answer"])
        except AnswerError as err:
            self._error(err.status, str(err))
            return
        except OSError as err:  # a full disk, a file made read-only while serving
            log.error("answer not saved: %s", err)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"not saved: the answers file cannot be written ({err}); "
                                                          f"tell whoever runs this page")
            return
        self._json(HTTPStatus.OK, self.server.state())

    def _read_json(self) -> Any:
        """The request body as JSON, or None after sending the 4xx that says why it is refused."""
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, f"Content-Type {content_type or 'none'!r} refused; "
                                                           f"send application/json")
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
            return None
        if length < 0 or length > MAX_BODY:
            self.close_connection = True  # the unread body must not be parsed as the next request
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body of {length} bytes refused; the limit is {MAX_BODY}")
            return None
        raw = self.rfile.read(length)
        try:
            return io.loads_unique(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            self._error(HTTPStatus.BAD_REQUEST, f"the body is not valid JSON: {err}")
            return None
        except ValueError as err:  # a key written twice: JSON would keep the last value without a word
            self._error(HTTPStatus.BAD_REQUEST, f"the body names a key twice ({err}); send each key once")
            return None
        except RecursionError:
            self._error(HTTPStatus.BAD_REQUEST, "the body is not valid JSON: nested too deeply")
            return None


def answers_home(batch_dir: Path) -> str:
    """Where the human-evaluation table imports a batch's answers from, as advice: ``data/human/<task>/<batch>/
    answers.jsonl``. The task is the folder the export wrote the batch under (``results/human/<task>/batches/
    <batch>``; batch.json does not hold it); a batch folder kept elsewhere gets ``<task>`` to fill in."""
    folder = batch_dir.resolve()
    task = folder.parent.parent.name if folder.parent.name == "batches" else "<task>"
    return f"data/human/{task}/{folder.name}/answers.jsonl"


ANSWERS_ROOT = ("data", "human")  # the answers tree the human-evaluation table imports: data/human/<task>/<batch>/


def misplaced_answers(batch_dir: Path, answers: Path) -> Optional[str]:
    """Why ``answers`` is the wrong answers file for the batch in ``batch_dir``, or None: it lies in the answers
    tree (``data/human/``, as the path names it) but not in this batch's folder of it (:func:`answers_home`), so
    the import would read it as another batch's answers (``data/human/<task>/<other batch>/``), or not at all (a
    file above the batch folders, or in a folder inside one). A path outside ``data/human/`` is the user's choice
    (answers kept elsewhere are copied in by hand), and so is any batch folder of the tree for a batch kept outside
    ``results/human/<task>/batches/``, whose folder name tells no batch of the tree."""
    parts = Path(os.path.abspath(answers)).parts
    starts = [i for i in range(len(parts) - 1) if parts[i:i + 2] == ANSWERS_ROOT]
    if not starts:
        return None
    root = Path(*parts[:starts[-1] + 2])
    rest = parts[starts[-1] + 2:]
    home = answers_home(batch_dir)
    task = home.split("/")[2]  # "<task>": a batch folder kept outside results/human/<task>/batches/
    if len(rest) == 3 and (task == "<task>" or (rest[0], rest[1]) == (task, batch_dir.resolve().name)):
        return None
    if len(rest) == 3:
        which = f"batch {rest[1]}" if task == rest[0] else f"task {rest[0]}'s batch {rest[1]}"
        found = f"{root / rest[0] / rest[1]}/, the answers folder of {which}, which the import reads as its answers"
    else:
        found = (f"{root / Path(*rest[:-1])}/, where the import reads no answers (it reads {root}/<task>/<batch>/, "
                 f"the folder of the batch they answer)")
    return (f"--answers {answers} lies in {found}; this page serves batch {batch_dir.resolve().name}, whose answers "
            f"go in {home}: give that path")


def build_server(batch_dir: str | Path, annotator: str, answers: str | Path,
                 port: int = DEFAULT_PORT) -> AnnotationServer:
    """A ready (not yet serving) server for one annotator; ``port=0`` picks a free port. It watches ``batch_dir``
    from before it reads the batch (:class:`BatchWatch`): a batch exported there since is refused on every request.
    A name the answers file holds in another spelling (``Alice`` where it has ``alice``) is an AnswerError; an answers
    file that is not a file of its own (a link or hard link into DVC's cache, where it was added with ``dvc add`` and a
    link cache type: :func:`grueflow.human.answers.shared_file`) is a DataError, before any answer is taken."""
    batch_dir = Path(batch_dir)
    watch = BatchWatch(batch_dir) if (batch_dir / ITEMS).is_file() else None  # taken first: a change while read shows
    batch = read_batch(batch_dir)
    if Path(answers).suffix.lower() != PAGE_SUFFIX:  # the import picks its reader by suffix: .csv is a platform's
        raise io.DataError(f"--answers {answers}: the page writes JSON lines, which the import reads from a "
                           f"{PAGE_SUFFIX} file; name it so, e.g. {answers_home(batch_dir)}")
    if Path(answers).resolve().is_relative_to(batch_dir.resolve()):
        raise io.DataError(f"--answers {answers} is inside the batch folder, which a re-export replaces; "
                           f"keep answers elsewhere, e.g. {answers_home(batch_dir)}")
    misplaced = misplaced_answers(batch_dir, Path(answers))
    if misplaced is not None:
        raise io.DataError(misplaced)
    store = AnswerStore(answers, batch)
    records = store.records()  # a corrupt answers file fails now, before anyone annotates
    foreign = next((r["item_id"] for r in records if isinstance(r.get("item_id"), str) and batch.item(r["item_id"])
                    is None and tag_of(r["item_id"]) != batch.tag), None)
    if foreign is not None:  # another batch's answers: this batch's would be mixed into them
        raise io.DataError(f"--answers {answers} holds answers to item {foreign!r} of another batch than {batch_dir} "
                           f"(tag {batch.tag}); give this batch its own answers file")
    store.check_spelling(check_annotator(annotator))  # one person, one name: resume under the name the file knows
    try:  # and one that cannot be written, or lies in a stage's output: every answer would be lost
        inside_output("--answers", Path(answers))
        check_writable("--answers", Path(answers))
        for file in (Path(answers), Path(answers).with_name(Path(answers).name + LEFTOVER_SUFFIX)):
            shared = shared_file(file)  # DVC's cached copy, linked in (read-only): every answer would go into it
            if shared is not None:
                raise ConfigError(f"--answers {shared}")
        if Path(answers).exists() and not os.access(answers, os.W_OK):
            raise ConfigError(f"--answers {answers}: cannot write the file: permission denied")
    except ConfigError as err:
        raise io.DataError(str(err)) from None
    return AnnotationServer(batch, batch_dir.name, store, annotator, port, watch=watch)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``annotate`` command; returns the exit code (2 for a bad batch, answers file or name)."""
    p = argparse.ArgumentParser(prog="grueflow annotate", description=__doc__.split("\n\n")[0])
    p.add_argument("batch_dir", type=Path, help="a batch folder written by stages/export_human_eval.py")
    p.add_argument("--annotator", required=True, action=GivenOnce,
                   help="your name (letters, digits, _.@-); answers are keyed by it, so give it as the answers "
                        "file has it (the page refuses 'Alice' where the file has 'alice')")
    p.add_argument("--answers", type=Path, required=True, action=GivenOnce,
                   help="the answers file, JSON lines named .jsonl, outside the batch folder (e.g. "
                        "data/human/<task>/<batch>/answers.jsonl)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port} is not a port; give 0 to 65535 (0 picks a free one)")
    if args.answers.is_dir():
        p.error(f"--answers {args.answers} is a folder; give the answers file, e.g. {answers_home(args.batch_dir)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        server = build_server(args.batch_dir, args.annotator, args.answers, args.port)
    except (io.DataError, AnswerError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: cannot serve on {HOST}:{args.port}: {err}; pick another --port", file=sys.stderr)
        return 2
    log.info("annotating %s as %s: open %s (%d/%d answered); answers go to %s; Ctrl-C stops", args.batch_dir,
             server.annotator, server.url, len(server.store.latest(server.annotator)), len(server.batch.items),
             server.store.path)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
