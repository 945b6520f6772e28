"""What a deployment's limiters hold now, for ``ackloop limits`` and ``GET /limits``: each
model quota as declared and its shards (calls counted in the last minute, calls waiting for
their places, a 429's pause, an adaptive share), each concurrency limit's keys (holders and
line), and each spend limit's periods (spent, calls). Read from the limiters' documents, never
written."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ackloop.config.settings import Settings
from ackloop.domain.jsondict import JsonDict
from ackloop.engine import live_limits, quota, quota_log
from ackloop.store import AgentStore


def _shard_view(shard: quota_log.Shard, now: float) -> JsonDict:
    waiting = [e for e in shard.entries if e.at > now]
    return {"counted": len(shard.entries) - len(waiting), "waiting": len(waiting),
            "next_place_in_s": round(min(e.at for e in waiting) - now, 1) if waiting else None,
            "paused_for_s": round(max(0.0, shard.paused_until - now), 1),
            "share": round(shard.scale.share, 3)}


async def snapshot(settings: Settings, store: AgentStore, now: float) -> dict[str, Any]:
    """The limits in force (as set while the deployment runs, else as declared:
    :mod:`ackloop.engine.live_limits`) and where their limiters stand at ``now``."""
    limits = live_limits.in_force(settings, await store.quotas.read_set()
                                  if settings.limits_refresh_seconds > 0 else None)
    quotas = []
    for declared in limits.model_quotas:
        shards = {}
        names = [f"{declared.quota_id}-{index:03d}" for index in range(declared.shard_count)]
        for name, doc in zip(names, await store.quotas.read_shards(names), strict=True):
            shard = quota_log.Shard.of(doc, now)
            if shard.entries or shard.paused_until > now:
                shards[name] = _shard_view(shard, now)
        per_shard = quota.limits_of(declared)
        quotas.append({**declared.model_dump(mode="json"), "quota": declared.quota_id,
                       "shards": declared.shard_count,
                       "per_shard": {"requests": per_shard.requests, "tokens": per_shard.tokens},
                       "busy_shards": shards})
    slots = []
    for slots_id, doc in await store.quotas.listed("slots"):
        holders = [h for h in doc.get("holders") or [] if h.get("until", 0) > now]
        line = [w for w in doc.get("line") or [] if w.get("until", 0) > now]
        if holders or line:
            slots.append({"key": slots_id.rsplit("~", 1)[0], "holding": len(holders),
                          "in_line": len(line)})
    spend = [{"budget": spend_id.rsplit("~", 1)[0], "usd": round(float(doc.get("usd", 0)), 6),
              "calls": doc.get("calls", 0)}
             for spend_id, doc in await store.quotas.listed("spend")
             if float(doc.get("until", 0)) > now]
    return {"model_quotas": quotas,
            "concurrency_limits": [c.model_dump(mode="json") for c in limits.concurrency_limits],
            "concurrency_now": slots,
            "spend_limits": [b.model_dump(mode="json") for b in limits.spend_limits],
            "spend_now": spend,
            "set": {"lists": list(limits.set_lists), "by": limits.set_by, "at": limits.set_at,
                    "applies_within_s": settings.limits_refresh_seconds}}


def lines(view: dict[str, Any]) -> list[str]:
    """The snapshot as ``ackloop limits`` prints it."""
    out = []
    for q in view["model_quotas"]:
        out.append(f"model quota {q['quota']} ({q['mode']}): rpm {q['rpm'] or '-'}, tpm "
                   f"{q['tpm'] or '-'}, {q['headroom']:.0%} kept under them, {q['shards']} "
                   f"shard(s) of {q['per_shard']['requests'] or '-'} requests and "
                   f"{q['per_shard']['tokens'] or '-'} tokens a minute")
        for name, s in q["busy_shards"].items():
            line = (f"  {name}: {s['counted']} call(s) in the last minute, {s['waiting']} "
                    "waiting for their places")
            if s["next_place_in_s"] is not None:
                line += f", the next in {s['next_place_in_s']:g} s"
            if s["paused_for_s"]:
                line += f", paused {s['paused_for_s']:g} s more by a 429"
            if s["share"] < 1:
                line += f", share {s['share']:.0%}"
            out.append(line)
    for c in view["concurrency_limits"]:
        what = "run(s) at work" if c["steps"] == "runs" else f"{c['steps']} step(s)"
        out.append(f"concurrency: at most {c['limit']} {what} at once per {c['key']}")
    out += [f"  {s['key']}: {s['holding']} holding, {s['in_line']} in line"
            for s in view["concurrency_now"]]
    for b in view["spend_limits"]:
        out.append(f"spend: ${b['usd']:g} per {b['period']} per {b['key']} (over: {b['over']})")
    out += [f"  {s['budget']}: ${s['usd']:g} spent in {s['calls']} call(s)"
            for s in view["spend_now"]]
    changed = view.get("set") or {}
    if changed.get("lists"):
        out.append(f"set while running by {changed['by']} at {_utc(changed['at'])}: "
                   f"{', '.join(changed['lists'])} (the rest as declared; `ackloop limits "
                   "reset` goes back to the declared)")
    return out or ["no limits declared (ACKLOOP_MODEL_QUOTAS, ACKLOOP_CONCURRENCY_LIMITS, "
                   "ACKLOOP_SPEND_LIMITS) or set (`ackloop limits set`)"]


def _utc(at: float | None) -> str:
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
