"""The desk's eval, run offline in-process as CI runs it: every case passes."""

from __future__ import annotations

from pathlib import Path

from expense_desk.agents import catalog

from ackloop import AgentTester
from ackloop.evals import EvalRunner, load_dataset
from ackloop.evals.targets import InProcessTarget

DATASET = Path(__file__).resolve().parents[1] / "evals" / "expenses.yaml"


# --8<-- [start:eval]
async def test_every_case_of_the_eval_passes() -> None:
    report = await EvalRunner(agents=catalog).run(load_dataset(DATASET))
    assert report.passed, [c.failures() for c in report.cases if not c.passed]
    assert report.summary.runs == 6
# --8<-- [end:eval]


async def test_a_receipt_goes_with_its_question() -> None:
    desk = AgentTester(catalog)  # the engine the cases run on, kept to read their runs after
    report = await EvalRunner(target=InProcessTarget(deps=desk.deps, loop=desk.loop),
                              agents=catalog, concurrency=1).run(load_dataset(DATASET))
    assert report.passed
    for case in report.cases:
        run = await desk.deps.store.runs.get_run(case.run_id or "")
        assert run is not None
        types = [f["file_data"]["mime_type"] for f in run.files]
        expected = {"dinner-receipt-png": ["image/png"], "hotel-receipt-pdf": ["application/pdf"]}
        assert types == expected.get(case.name, []), case.name
