"""The sandbox server: each API's shape, fault knobs, the seed tools end to end, the process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import ackloop
from ackloop.config.settings import Settings
from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import ToolContext
from ackloop.tools.seed import seed_toolset
from ackloop_dev.fakes.sandbox_apis import SandboxApis
from ackloop_dev.fakes.sandbox_data import ECHO_IP, QUIET_AREAS
from ackloop_dev.fakes.sandbox_faults import Faults


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as client:
        yield client


async def test_alerts_have_weather_gov_s_shape(
    sandbox: SandboxApis, http: httpx.AsyncClient
) -> None:
    response = await http.get(f"{sandbox.base_url}/alerts/active/area/OK")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/geo+json"
    body = response.json()
    assert body["type"] == "FeatureCollection"
    assert body["title"] == "Current watches, warnings, and advisories for Oklahoma"
    events = [feature["properties"]["event"] for feature in body["features"]]
    assert events == ["Tornado Watch", "Severe Thunderstorm Warning"]
    feature = body["features"][0]
    assert feature["type"] == "Feature" and feature["id"].startswith(sandbox.base_url)
    assert {"areaDesc", "headline", "severity", "sent", "expires", "senderName"} <= set(
        feature["properties"]
    )


async def test_alerts_are_deterministic_and_some_areas_are_quiet(
    sandbox: SandboxApis, http: httpx.AsyncClient
) -> None:
    first = (await http.get(f"{sandbox.base_url}/alerts/active/area/TX")).json()
    second = (await http.get(f"{sandbox.base_url}/alerts/active/area/TX")).json()
    assert first == second and 1 <= len(first["features"]) <= 3
    assert "AZ" in QUIET_AREAS
    quiet = (await http.get(f"{sandbox.base_url}/alerts/active/area/AZ")).json()
    assert quiet["features"] == []


async def test_an_unknown_area_is_a_problem_json_400(
    sandbox: SandboxApis, http: httpx.AsyncClient
) -> None:
    response = await http.get(f"{sandbox.base_url}/alerts/active/area/ZZ")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "https://api.weather.gov/problems/BadRequest"
    assert problem["parameterErrors"][0]["parameter"] == "path.area"


async def test_ip_echo_is_plain_text(sandbox: SandboxApis, http: httpx.AsyncClient) -> None:
    response = await http.get(sandbox.ip_echo_url)
    assert response.text == f"{ECHO_IP}\n"
    assert response.headers["content-type"] == "text/plain"


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        (ECHO_IP, {"status": "success", "city": "Norman", "region": "OK", "countryCode": "US"}),
        ("1.1.1.1", {"status": "success", "country": "Australia", "region": "QLD"}),
        ("10.1.2.3", {"status": "fail", "message": "private range", "query": "10.1.2.3"}),
        ("127.0.0.1", {"status": "fail", "message": "reserved range", "query": "127.0.0.1"}),
        ("nonsense", {"status": "fail", "message": "invalid query", "query": "nonsense"}),
    ],
)
async def test_ip_api_shapes(
    sandbox: SandboxApis, http: httpx.AsyncClient, ip: str, expected: dict[str, str]
) -> None:
    body = (await http.get(f"{sandbox.base_url}/json/{ip}")).json()
    assert expected.items() <= body.items()


async def test_health_and_stats(http: httpx.AsyncClient) -> None:
    with SandboxApis() as apis:
        assert (await http.get(f"{apis.base_url}/")).json() == {"status": "ok"}
        await http.get(apis.ip_echo_url)
        await http.get(f"{apis.base_url}/json/{ECHO_IP}")
        await http.get(f"{apis.base_url}/alerts/active/area/ZZ")
        stats = (await http.get(f"{apis.base_url}/_admin/stats")).json()
    assert stats == {
        "requests": 3,
        "requests:ip": 1,
        "requests:ipapi": 1,
        "requests:alerts": 1,
        "status:200": 3,
        "status:400": 1,
    }


async def test_a_full_error_rate_answers_500(http: httpx.AsyncClient) -> None:
    with SandboxApis(faults=Faults(error_rate=1.0, paths=("/alerts",))) as apis:
        alerts = await http.get(f"{apis.base_url}/alerts/active/area/OK")
        echo = await http.get(apis.ip_echo_url)
        stats = apis.stats()
    assert alerts.status_code == 500
    assert alerts.json()["title"] == "Unexpected Problem"
    assert echo.status_code == 200
    assert stats["faults:500"] == 1


async def test_faults_are_seeded_and_replayable(http: httpx.AsyncClient) -> None:
    async def statuses() -> list[int]:
        with SandboxApis(faults=Faults(error_rate=0.5, seed=7)) as apis:
            return [(await http.get(apis.ip_echo_url)).status_code for _ in range(12)]

    first = await statuses()
    assert first == await statuses()
    assert 200 in first and 500 in first


async def test_faults_can_be_changed_at_runtime_and_forced_per_request(
    http: httpx.AsyncClient,
) -> None:
    with SandboxApis() as apis:
        forced = await http.get(f"{apis.ip_echo_url}?fault=500")
        changed = await http.post(f"{apis.base_url}/_admin/faults", json={"error_rate": 1.0})
        after = await http.get(apis.ip_echo_url)
        refused = await http.post(f"{apis.base_url}/_admin/faults", json={"bogus": 1})
    assert forced.status_code == 500
    assert changed.json()["faults"]["error_rate"] == 1.0
    assert after.status_code == 500
    assert refused.status_code == 400 and "bogus" in refused.json()["error"]


async def test_a_delay_makes_a_client_time_out(http: httpx.AsyncClient) -> None:
    with SandboxApis(faults=Faults(delay_seconds=2.0)) as apis:
        with pytest.raises(httpx.ReadTimeout):
            await http.get(apis.ip_echo_url, timeout=0.2)
        assert apis.stats()["faults:delay"] == 1


async def test_where_am_i_chain_finds_alerts(sandbox: SandboxApis, context: ToolContext) -> None:
    settings = sandbox.settings()
    async with httpx.AsyncClient() as client:
        tools = seed_toolset(client, settings)
        ip = await tools.execute(FunctionCall(name="get_ip_address"), context)
        where = await tools.execute(
            FunctionCall(name="get_location_info", args={"ipaddress": ip.response["result"]}),
            context,
        )
        region = where.response["result"]["region"]
        alerts = await tools.execute(
            FunctionCall(name="get_weather_alerts", args={"request": {"state": region}}), context
        )
    assert ip.response == {"result": ECHO_IP}
    assert where.response["result"]["location"] == "Norman, Oklahoma, United States"
    result = alerts.response["result"]
    assert result["count"] == 2
    assert [alert["event"] for alert in result["alerts"]] == [
        "Tornado Watch",
        "Severe Thunderstorm Warning",
    ]


async def test_private_ip_through_the_sandbox_is_advice(
    sandbox: SandboxApis, context: ToolContext
) -> None:
    async with httpx.AsyncClient() as client:
        tools = seed_toolset(client, sandbox.settings())
        outcome = await tools.execute(
            FunctionCall(name="get_location_info", args={"ipaddress": "10.0.0.5"}), context
        )
    assert outcome.is_error
    assert outcome.response["error"].startswith("10.0.0.5 is in a private range")


async def test_chaos_500_and_delay_reach_the_model_as_tool_errors(context: ToolContext) -> None:
    faults = Faults(error_rate=1.0, delay_seconds=1.0, paths=("/alerts",))
    with SandboxApis(faults=faults) as apis:
        fast_fail = apis.settings(Settings(tool_timeout_seconds=10))
        async with httpx.AsyncClient() as client:
            # The delay (1 s) is below the HTTP timeout (5 s): the 500 is what the model reads.
            failed = await seed_toolset(client, fast_fail).execute(
                FunctionCall(name="get_weather_alerts", args={"state": "OK"}), context
            )
            impatient = apis.settings(Settings(tool_timeout_seconds=0.5))
            slow = await seed_toolset(client, impatient).execute(
                FunctionCall(name="get_weather_alerts", args={"state": "OK"}), context
            )
    assert failed.response == {"error": "the weather service failed (HTTP 500); try again later"}
    assert slow.response == {
        "error": "the weather service did not answer within 0.25 s; try again later"
    }


def test_runs_as_a_process_until_sigterm() -> None:
    shared = str(Path(ackloop.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([shared, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "ackloop_dev.fakes.sandbox_apis", "--port", "0"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline().strip()
            assert first.startswith("sandbox APIs listening on http://127.0.0.1:")
            url = first.rsplit(" ", 1)[-1]
            assert httpx.get(f"{url}/", timeout=5).json() == {"status": "ok"}
            assert httpx.get(f"{url}/ip", timeout=5).text == f"{ECHO_IP}\n"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_faults_read_the_environment_and_refuse_nonsense() -> None:
    env = {
        "ACKLOOP_SANDBOX_ERROR_RATE": "0.25",
        "ACKLOOP_SANDBOX_DELAY_SECONDS": "3",
        "ACKLOOP_SANDBOX_DELAY_RATE": "0.1",
        "ACKLOOP_SANDBOX_SEED": "42",
        "ACKLOOP_SANDBOX_FAULT_PATHS": "/alerts, /json",
    }
    assert Faults.from_env(env) == Faults(
        error_rate=0.25, delay_seconds=3, delay_rate=0.1, seed=42, paths=("/alerts", "/json")
    )
    with pytest.raises(ValueError, match="error_rate must be between 0 and 1"):
        Faults(error_rate=2)


def test_settings_and_environment_point_at_the_server(sandbox: SandboxApis) -> None:
    settings = sandbox.settings(Settings(tool_timeout_seconds=7))
    assert settings.tool_timeout_seconds == 7
    assert settings.nws_base_url == settings.ipapi_base_url == sandbox.base_url
    assert settings.ip_echo_url == f"{sandbox.base_url}/ip"
    assert sandbox.environment() == {
        "ACKLOOP_NWS_BASE_URL": sandbox.base_url,
        "ACKLOOP_IPAPI_BASE_URL": sandbox.base_url,
        "ACKLOOP_IP_ECHO_URL": f"{sandbox.base_url}/ip",
    }
