"""The peers' list prices for the monthly cost curve, each with the page it was read from.

Every figure is a :class:`Price` naming its source and the date it was read. A figure that could
not be checked against the vendor's own page says so in ``unverified`` (and why); the curve
marks the peers that rest on one. Prices are USD list prices, no free tier, no commitment.

How each peer is costed (a reference run is model -> tool -> model -> tool -> model):

- **Temporal Cloud**: 6 actions a run (Temporal's Actions page: a Workflow start is one action,
  each Activity started is one; the reference workflow starts once and runs 5 activities, with
  no heartbeat timeout, timer, signal or query; the client's wait for the result is a long poll
  of the history, not a query), at the Developer plan's price per action plus its plan fee (no
  base fee, 10% of usage); the worker on one e2-small VM. Storage is left out (a finished
  run's few kB of retained history cost well under a millionth of a dollar).
- **Inngest** (Pro plan): 6 executions a run (Inngest's limits page: "a function run with five
  steps uses six executions"), past the plan's included executions, plus the plan's monthly
  price. The app's hosting is left out: Inngest calls the app's endpoint once per step and once
  more to finish, 6 requests a run, $2.40 a million runs at Cloud Run's request price
  (:data:`ackloop.domain.cost.PRICES`), plus the app's CPU.
- **DBOS Transact** (an open-source library, no fee): the application and PostgreSQL on the
  same e2-medium VM with a 10 GB SSD persistent disk (the benchmark runs it that way too; a
  managed Cloud SQL instance would add its own instance price).
- **Restate** (self-hosted, open source): ``restate-server`` and the service on one e2-medium VM
  with a 10 GB SSD persistent disk (Restate's memory page sizes its default pools at about
  3.3 GiB; 4 GB holds them).
"""

from __future__ import annotations

from dataclasses import dataclass

HOURS_PER_MONTH = 730.0
READ = "2026-12-04"
"""The date every page below was read."""

VM_PRICING = "https://cloud.google.com/compute/vm-instance-pricing"
DISK_PRICING = "https://cloud.google.com/compute/disks-image-pricing"
TEMPORAL_PRICING = "https://docs.temporal.io/cloud/pricing"
TEMPORAL_ACTIONS = "https://docs.temporal.io/cloud/actions"
INNGEST_PRICING = "https://www.inngest.com/pricing"
INNGEST_LIMITS = "https://www.inngest.com/docs/durable-execution/limits"
RESTATE_MEMORY = "https://docs.restate.dev/server/memory"

VM_TABLES_UNREAD = ("Google's VM pricing page was read only up to its introduction (its price "
                    "tables are filled in by script); the figure is the us-central1 on-demand "
                    "E2 rate as third-party price books quote it")


@dataclass(frozen=True)
class Price:
    """One list price (or a count a price rests on), where it was read, and when."""

    what: str
    value: float
    unit: str
    source: str
    read: str = READ
    unverified: str = ""
    """Why the figure is not checked against the vendor's page (empty: it is)."""


E2_VCPU = Price("E2 vCPU, us-central1, on demand", 0.021811, "USD per vCPU-hour", VM_PRICING,
                unverified=VM_TABLES_UNREAD)
E2_MEMORY = Price("E2 memory, us-central1, on demand", 0.002923, "USD per GB-hour", VM_PRICING,
                  unverified=VM_TABLES_UNREAD)
PD_SSD = Price("SSD persistent disk (pd-ssd)", 0.17, "USD per GB-month", DISK_PRICING)
"""The page's example: a 200 GB SSD Persistent Disk volume costs $34.00 for the whole month."""
TEMPORAL_ACTION = Price("Temporal Cloud action, Developer plan (at every volume)", 50.0e-6,
                        "USD per action", TEMPORAL_PRICING)
TEMPORAL_PLAN_FEE = Price("Temporal Cloud Developer plan: no base fee, 10% of usage spend "
                          "(Business: the greater of $500/month and 10%)", 0.10,
                          "share of usage", TEMPORAL_PRICING)
TEMPORAL_RUN_ACTIONS = Price("Temporal actions a reference run (1 workflow start, 5 activities)",
                             6.0, "actions per run", TEMPORAL_ACTIONS)
INNGEST_PRO = Price("Inngest Pro plan", 99.0, "USD per month", INNGEST_PRICING,
                    unverified="no stored copy of Inngest's pricing page shows the current "
                    "plans; third-party reviews quote $75 (mid 2026) and $99 (September 2026)")
INNGEST_INCLUDED = Price("Inngest Pro: executions included a month", 1_000_000.0, "executions",
                         INNGEST_LIMITS)
INNGEST_EXECUTION = Price("Inngest Pro: each execution past the included ones", 50.0e-6,
                          "USD per execution", INNGEST_PRICING,
                          unverified="the rate is on Inngest's pricing page only, of which no "
                          "current copy was found; the figure is recalled, not read")
INNGEST_RUN_EXECUTIONS = Price("Inngest executions a reference run (the run and its 5 steps)",
                               6.0, "executions per run", INNGEST_LIMITS)
RESTATE_MEMORY_POOLS = Price("Restate's default memory pools (RocksDB 2 GiB, query engine 1 GiB, "
                             "record cache 250 MiB)", 3.25, "GiB", RESTATE_MEMORY)


def e2_hourly(vcpus: float, memory_gb: float) -> float:
    """An E2 VM's hourly price: a shared-core e2-small is billed as 0.5 vCPU and 2 GB, an
    e2-medium as 1 vCPU and 4 GB."""
    return vcpus * E2_VCPU.value + memory_gb * E2_MEMORY.value


E2_SMALL_MONTH = e2_hourly(0.5, 2.0) * HOURS_PER_MONTH
E2_MEDIUM_MONTH = e2_hourly(1.0, 4.0) * HOURS_PER_MONTH
DISK_10GB_MONTH = 10 * PD_SSD.value


@dataclass(frozen=True)
class PeerPrices:
    """A peer's month: what it holds running, plus a price per billed unit past the included
    ones; and every figure it rests on."""

    name: str
    fixed_usd_month: float
    usd_per_unit: float
    units_per_run: float
    basis: str
    prices: tuple[Price, ...]
    included_units: float = 0.0

    @property
    def usd_per_run(self) -> float:
        """What one more run costs once the included units are used."""
        return self.usd_per_unit * self.units_per_run

    @property
    def unverified(self) -> bool:
        """Whether a figure of this peer's is not checked against its vendor's page."""
        return any(p.unverified for p in self.prices)

    def monthly_usd(self, runs: float) -> float:
        """A month's cost at ``runs`` runs."""
        billed = max(0.0, runs * self.units_per_run - self.included_units)
        return self.fixed_usd_month + billed * self.usd_per_unit


_SELF_HOSTED = (E2_VCPU, E2_MEMORY, PD_SSD)

PEER_PRICES = (
    PeerPrices(
        "Temporal Cloud", E2_SMALL_MONTH,
        TEMPORAL_ACTION.value * (1 + TEMPORAL_PLAN_FEE.value), TEMPORAL_RUN_ACTIONS.value,
        "Developer plan: $50 per million actions plus the plan's 10%, 6 actions a run; the "
        "worker on one e2-small VM",
        (TEMPORAL_ACTION, TEMPORAL_PLAN_FEE, TEMPORAL_RUN_ACTIONS, E2_VCPU, E2_MEMORY)),
    PeerPrices(
        "Inngest", INNGEST_PRO.value, INNGEST_EXECUTION.value, INNGEST_RUN_EXECUTIONS.value,
        "Pro plan, 1 million executions included, 6 executions a run; the app's hosting left "
        "out",
        (INNGEST_PRO, INNGEST_INCLUDED, INNGEST_EXECUTION, INNGEST_RUN_EXECUTIONS),
        included_units=INNGEST_INCLUDED.value),
    PeerPrices(
        "DBOS (self-hosted)", E2_MEDIUM_MONTH + DISK_10GB_MONTH, 0.0, 1.0,
        "the application and PostgreSQL on one e2-medium VM with 10 GB of SSD disk",
        _SELF_HOSTED),
    PeerPrices(
        "Restate (self-hosted)", E2_MEDIUM_MONTH + DISK_10GB_MONTH, 0.0, 1.0,
        "restate-server and the service on one e2-medium VM with 10 GB of SSD disk",
        (*_SELF_HOSTED, RESTATE_MEMORY_POOLS)),
)
