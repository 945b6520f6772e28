"""S8: a new run's conversation id is its run id, a hash of the caller and the request id, so
someone who could predict both (a request id is often a counter or a timestamp) created that
conversation first, and the victim's ``POST /runs`` answered 404 forever. A conversation named
by a run id can now be joined only once that run exists, by its owner: the squatter is refused
with nothing written, and the victim's run starts its conversation as if no one had tried.
Two callers behind Cloud Run IAM, in-process API and engine."""

from __future__ import annotations

import httpx

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.api.tokens_support import Issuer, as_forwarded_by_cloud_run
from tests.engine.fakes import CountingToolbox, make_loop


async def test_a_predicted_conversation_id_cannot_be_squatted() -> None:
    issuer = Issuer()
    loop = make_loop(ScriptedModel.from_turns([text_turn("hi"), text_turn("hi")]),
                     CountingToolbox())

    async def deps() -> Deps:
        return loop.deps

    def caller(subject: str) -> dict[str, str]:
        token = as_forwarded_by_cloud_run(issuer.token(
            "32555940559.apps.googleusercontent.com", email=f"{subject}@example.com",
            sub=subject))
        return {"Authorization": f"Bearer {token}"}

    victim_run = run_id_for_request("order-42", "google:alice")
    app = create_app(Settings(api_auth="cloud_run_iam"), deps=deps)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        before = dict(loop.deps.store.db.inner._docs)  # type: ignore[attr-defined]
        squat = await api.post("/runs", json={"text": "mine now",
                                              "conversation_id": victim_run},
                               headers=caller("mallory"))
        assert squat.status_code == 404 and squat.json()["code"] == "conversation_not_found"
        assert loop.deps.store.db.inner._docs == before  # type: ignore[attr-defined]

        mine = await api.post("/runs", json={"text": "hello"},
                              headers=caller("alice") | {"Idempotency-Key": "order-42"})
        assert mine.status_code == 202, mine.text
        assert mine.json()["run_id"] == victim_run
        await loop.run_until_idle()
        shown = await api.get(f"/runs/{victim_run}", headers=caller("alice"))
        assert shown.status_code == 200 and shown.json()["status"] == "completed"

        # Once the run exists, it is still its owner's conversation only.
        late = await api.post("/runs", json={"text": "and now?",
                                             "conversation_id": victim_run},
                              headers=caller("mallory"))
        assert late.status_code == 404 and late.json()["code"] == "conversation_not_found"
