"""bench/qa.py times the held-out articles of +experiment=squad: the same questions the run validates and tests on."""

import json
import sys

from conftest import REPO

sys.path.insert(0, str(REPO))
from bench.qa import held_out  # noqa: E402


def test_the_bench_asks_the_experiments_held_out_questions():
    questions = held_out()
    titles = {q.title for q in questions}
    squad = json.loads((REPO / "data" / "squad" / "train-v1.1-first11.json").read_text())
    per_title = {a["title"]: sum(len(p["qas"]) for p in a["paragraphs"]) for a in squad["data"]}
    assert len(titles) == 3 and len(questions) == sum(per_title[t] for t in titles)
    assert len(held_out(7)) == 7
