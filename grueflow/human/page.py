"""The local annotation page: HTML shell, style sheet and script (served by :mod:`grueflow.human.annotate`).

Model text reaches the page only as JSON and is put into the DOM with ``textContent``; the script never
uses ``innerHTML``. The server also sends a Content-Security-Policy that allows no inline script, so
even markup that slipped through could not run.
"""

from __future__ import annotations

import html

from grueflow.human.batch import Batch


def shell(batch: Batch, annotator: str, batch_name: str) -> str:
    """The page's HTML; the only values in it (batch name, annotator) are escaped here, server-side."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>grueflow annotation: {html.escape(batch_name)}</title>
<link rel="stylesheet" href="/page.css">
</head>
<body>
<header>
  <b>{html.escape(batch_name)}</b> ({html.escape(batch.kind)})
  &middot; annotator <b id="annotator">{html.escape(annotator)}</b>
  &middot; <span id="progress">loading</span> <progress id="bar" max="1" value="0"></progress>
</header>
<main id="item" hidden>
  <div class="meta">item <span id="item-id"></span></div>
  <h2>Prompt</h2>
  <div id="prompt" class="text"></div>
  <section id="likert" hidden>
    <h2>Continuation</h2>
    <div id="completion" class="text completion"></div>
    <div id="criteria"></div>
    <p class="help">Keys: <kbd>1</kbd>-<kbd>5</kbd> score the highlighted criterion and move to the next,
      <kbd>&uarr;</kbd>/<kbd>&darr;</kbd> move between criteria, <kbd>Backspace</kbd> clears, <kbd>Enter</kbd> saves.</p>
  </section>
  <section id="pairwise" hidden>
    <div class="pair">
      <div><h2>A</h2><div id="choice-a" class="text completion"></div></div>
      <div><h2>B</h2><div id="choice-b" class="text completion"></div></div>
    </div>
    <p id="question"></p>
    <p><button id="pick-a" data-choice="A">A is better</button> <button id="pick-tie" data-choice="tie">Tie</button>
       <button id="pick-b" data-choice="B">B is better</button></p>
    <p class="help">Keys: <kbd>a</kbd> or <kbd>&larr;</kbd> for A, <kbd>b</kbd> or <kbd>&rarr;</kbd> for B,
      <kbd>t</kbd> for a tie; each saves at once.</p>
  </section>
</main>
<div id="done" hidden><h2>All items answered. Thank you.</h2></div>
<div id="saved" aria-live="polite"></div>
<div id="error" role="alert"></div>
<script src="/page.js"></script>
</body>
</html>
"""


CSS = """body { font-family: sans-serif; max-width: 900px; margin: 1em auto; line-height: 1.45; }
header { border-bottom: 1px solid #ccc; padding-bottom: 6px; margin-bottom: 10px; }
.text { white-space: pre-wrap; border: 1px solid #bbb; border-radius: 4px; padding: 8px; }
.completion { background: #f4f8ff; }
.pair { display: flex; gap: 12px; } .pair > div { flex: 1; }
.criterion { border: 2px solid transparent; padding: 6px; margin: 6px 0; }
.criterion.active { border-color: #36c; }
.criterion button.on { background: #36c; color: #fff; }
.meta, .help { color: #666; font-size: 90%; }
#error { color: #b00; font-weight: bold; }
#saved { color: #070; }
"""


SCRIPT = r""""use strict";
(function () {
  let state = null, scores = {}, active = 0, busy = false;
  const $ = (id) => document.getElementById(id);
  const setText = (id, value) => { $(id).textContent = value; };

  function fail(message) { setText("error", message); }

  async function call(method, body) {
    const url = method === "GET" ? "/api/state" : "/api/answer";
    const options = { method: method, headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(url, options);
    const data = await response.json();
    if (!response.ok) { throw new Error(data.error || ("HTTP " + response.status)); }
    return data;
  }

  function criterionRow(criterion, index) {
    const row = document.createElement("div");
    row.className = "criterion" + (index === active ? " active" : "");
    const title = document.createElement("div");
    const name = document.createElement("b");
    name.textContent = criterion.id;
    title.append(name, ": " + criterion.question + " (" + state.scale[0] + " = " + criterion.low + ", " +
                 state.scale[1] + " = " + criterion.high + ")");
    row.append(title);
    for (let v = state.scale[0]; v <= state.scale[1]; v++) {
      const button = document.createElement("button");
      button.textContent = String(v);
      if (scores[criterion.id] === v) { button.className = "on"; }
      button.addEventListener("click", () => { active = index; score(v); });
      row.append(button, " ");
    }
    return row;
  }

  function renderCriteria() {
    $("criteria").replaceChildren(...state.criteria.map(criterionRow));
  }

  function show(next) {
    state = next; scores = {}; active = 0;
    setText("progress", state.done + " / " + state.total + " answered");
    $("bar").max = state.total; $("bar").value = state.done;
    if (!state.item) { $("item").hidden = true; $("done").hidden = false; return; }
    $("done").hidden = true; $("item").hidden = false;
    setText("item-id", state.item.item_id);
    setText("prompt", state.item.prompt);
    const likert = state.kind === "likert";
    $("likert").hidden = !likert; $("pairwise").hidden = likert;
    if (likert) {
      setText("completion", state.item.machine_completion);
      renderCriteria();
    } else {
      setText("choice-a", state.item.choice_A);
      setText("choice-b", state.item.choice_B);
      setText("question", state.question);
    }
  }

  function score(value) {
    scores[state.criteria[active].id] = value;
    active = Math.min(active + 1, state.criteria.length - 1);
    renderCriteria();
  }

  async function save(answer) {
    if (busy || !state || !state.item) { return; }
    busy = true;
    const itemId = state.item.item_id;
    try {
      const next = await call("POST", { item_id: itemId, answer: answer });
      fail("");
      setText("saved", "saved " + itemId);
      show(next);
    } catch (error) {
      fail("not saved: " + error.message);
    } finally {
      busy = false;
    }
  }

  function onKey(event) {
    if (!state || !state.item || event.ctrlKey || event.metaKey || event.altKey) { return; }
    const key = event.key;
    if (state.kind === "likert") {
      const digit = Number(key);
      if (key.length === 1 && Number.isInteger(digit) && digit >= state.scale[0] && digit <= state.scale[1]) {
        score(digit);
      } else if (key === "ArrowDown") { active = Math.min(active + 1, state.criteria.length - 1); renderCriteria(); }
      else if (key === "ArrowUp") { active = Math.max(active - 1, 0); renderCriteria(); }
      else if (key === "Backspace") { delete scores[state.criteria[active].id]; renderCriteria(); }
      else if (key === "Enter") {
        const missing = state.criteria.filter((c) => !(c.id in scores)).map((c) => c.id);
        if (missing.length) { fail("score every criterion first: " + missing.join(", ")); }
        else { save(Object.assign({}, scores)); }
      } else { return; }
    } else {
      const choice = { a: "A", ArrowLeft: "A", b: "B", ArrowRight: "B", t: "tie" }[key];
      if (!choice) { return; }
      save({ choice: choice });
    }
    event.preventDefault();
  }

  document.addEventListener("keydown", onKey);
  for (const id of ["pick-a", "pick-b", "pick-tie"]) {
    $(id).addEventListener("click", (event) => save({ choice: event.currentTarget.dataset.choice }));
  }
  call("GET").then(show).catch((error) => fail("cannot load the batch: " + error.message));
})();
"""
