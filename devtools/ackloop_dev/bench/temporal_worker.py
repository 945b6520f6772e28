"""A Temporal worker process for the benchmark's reference workload.

Run as its own process so that its CPU and memory can be measured and it can be SIGKILLed::

    python -m ackloop_dev.bench.temporal_worker --address 127.0.0.1:7233 --task-queue bench \
        [--tuned] [--step-sleep 2] [--ledger executions.jsonl]

``--tuned`` shortens the sticky queue schedule-to-start timeout (the activities heartbeat on
their own when the workflow gives them a heartbeat timeout). ``--step-sleep S`` makes the first
tool call of every run last S seconds. SIGTERM or SIGINT shut the worker down.

Set up as Temporal's worker-performance docs recommend for throughput
(docs.temporal.io/develop/worker-performance/configuration): poller autoscaling for workflow
and activity tasks (``PollerBehaviorAutoscaling``; the dev server is 1.32, autoscaling needs
1.28); the SDK's default task slots, 100 of each kind (the activities are instant ``async``
functions, so no thread pool bounds them), and its default workflow cache (1,000, above the 200
runs in flight).
"""

import argparse
import asyncio
import signal
from collections.abc import Sequence
from datetime import timedelta

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import PollerBehaviorAutoscaling, Worker

from ackloop_dev.bench.temporal_workload import (
    TUNED_STICKY_SCHEDULE_TO_START,
    AgentWorkflow,
    BenchActivities,
    ExecutionLedger,
)

DEFAULT_STICKY_SCHEDULE_TO_START = timedelta(seconds=10)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the worker's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="host:port of the Temporal frontend")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--tuned", action="store_true", help="short sticky schedule-to-start")
    parser.add_argument("--step-sleep", type=float, default=0.0, help="first tool call lasts S s")
    parser.add_argument("--ledger", default=None, help="JSON-lines file of activity executions")
    return parser.parse_args(argv)


async def run_worker(args: argparse.Namespace) -> None:
    """Connect, serve the workload until SIGTERM/SIGINT, then shut down."""
    client = await Client.connect(
        args.address, namespace=args.namespace, data_converter=pydantic_data_converter
    )
    activities = BenchActivities(ExecutionLedger(args.ledger), args.step_sleep)
    sticky = TUNED_STICKY_SCHEDULE_TO_START if args.tuned else DEFAULT_STICKY_SCHEDULE_TO_START
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[AgentWorkflow],
        activities=[activities.generate_content, activities.dynamic_tool_activity],
        sticky_queue_schedule_to_start_timeout=sticky,
        workflow_task_poller_behavior=PollerBehaviorAutoscaling(),
        activity_task_poller_behavior=PollerBehaviorAutoscaling(),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with worker:
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m ackloop_dev.bench.temporal_worker``."""
    asyncio.run(run_worker(parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
