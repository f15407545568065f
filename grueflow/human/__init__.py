"""The human side of the preference loop: export evaluation batches, annotate them on a
local page, import the answers, measure agreement, and write the human-evaluation table and the
preference pairs.

* :mod:`grueflow.human.criteria` — what annotators are asked, per task (a registry);
* :mod:`grueflow.human.batch` — Likert and blinded pairwise batches, their CSV and manifest;
* :mod:`grueflow.human.templates` — crowdsourcing HTML templates with ``${column}`` placeholders;
* :mod:`grueflow.human.answers` — the append-only answers file;
* :mod:`grueflow.human.layout` — where answers lie (``data/human/<task>/<batch>/``), and what is not imported;
* :mod:`grueflow.human.annotate` — the local annotation server (``python -m grueflow.human.annotate``);
* :mod:`grueflow.human.agreement` — Krippendorff's alpha, Cohen's and Fleiss' kappa;
* :mod:`grueflow.human.results` — import, the table with confidence intervals, preferences.
"""
