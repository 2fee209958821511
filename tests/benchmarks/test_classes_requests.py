"""How the classes benchmark's requests say their class, objective and
tenant to each kind of target (``benchmarks.classes.requests``), and the
gateway's settings as make up gives them (``benchmarks.classes.targets``).
No engine."""

from benchmarks.classes.requests import ENGINE_PRIORITY, Kind, Prompts, body
from benchmarks.classes.targets import ADMISSION_OFF, GATEWAY, TARGETS, gateway_settings


def test_a_gateway_hears_the_class_in_its_header() -> None:
    headers, fields = Kind("chat", "high", 1.0).marks("header")
    assert headers == {"X-Priority": "high"}
    assert fields == {}


def test_vllm_direct_hears_the_class_as_the_body_priority_the_gateway_would_send() -> None:
    assert Kind("chat", "high", 1.0).marks("body") == ({}, {"priority": -1})
    assert Kind("bulk", "low", 30.0).marks("body") == ({}, {"priority": 1})
    # normal is vLLM's default: nothing to say.
    assert Kind("loose", "normal", 10.0).marks("body") == ({}, {})
    # What the gateway sends vLLM for each class (X-Vllm-Priority).
    assert ENGINE_PRIORITY == {"high": -1, "normal": 0, "low": 1}


def test_an_engine_ordering_by_arrival_hears_no_priority() -> None:
    # vLLM refuses a priority when it does not schedule by priority.
    assert Kind("chat", "high", 1.0).marks("none") == ({}, {})


def test_the_objective_goes_in_whole_milliseconds_and_the_tenant_by_name() -> None:
    kind = Kind("A", "normal", 10.0, objective_header=True, tenant="tenant-a")
    headers, _ = kind.marks("header")
    assert headers == {
        "X-Priority": "normal",
        "x-slo-ttft-ms": "10000",
        "X-Tenant-Id": "tenant-a",
    }
    # The same to vLLM direct, which ignores them: the requests differ only
    # in how the class is said.
    direct, _ = kind.marks("body")
    assert direct == {"x-slo-ttft-ms": "10000", "X-Tenant-Id": "tenant-a"}


def test_bulk_prompts_have_a_fixed_length_and_share_no_prefix() -> None:
    prompts = Prompts(seed=3)
    first, second = prompts.bulk(150), prompts.bulk(150)
    texts = [m[0]["content"].split("\n\n", 1) for m in (first, second)]
    assert [len(doc.split()) for _, doc in texts] == [150, 150]
    assert texts[0][0] != texts[1][0]  # the serial number leads


def test_every_body_has_a_fixed_length() -> None:
    b = body("tiny", [{"role": "user", "content": "x"}], 24)
    assert b["max_tokens"] == 24
    assert b["ignore_eos"] is True


def test_the_gateway_runs_as_make_up_sets_it() -> None:
    settings = gateway_settings(GATEWAY, "http://127.0.0.1:9", 128, 9100)
    assert settings["GATEWAY_UPSTREAM_URLS"] == "http://127.0.0.1:9"
    assert settings["GATEWAY_MAX_CONCURRENCY"] == "128"
    assert settings["GATEWAY_ENGINE_SCHEDULING"] == "priority"
    assert settings["GATEWAY_TOKENIZER_DIR"].endswith(".models/tiny")
    assert settings["GATEWAY_ADMIN_PORT"] == "9100"
    assert "GATEWAY_ADMISSION" not in settings
    assert all(name.startswith("GATEWAY_") for name in settings)


def test_the_negative_control_differs_only_in_admission() -> None:
    on = gateway_settings(GATEWAY, "http://127.0.0.1:9", 128, 9100)
    off = gateway_settings(ADMISSION_OFF, "http://127.0.0.1:9", 128, 9100)
    assert off == {**on, "GATEWAY_ADMISSION": "off"}


def test_every_part_has_its_anchor_and_the_anchor_again() -> None:
    for part, targets in TARGETS.items():
        names = [t.name for t in targets]
        direct = [n for n in names if n.startswith("direct")]
        assert any(n.endswith("-again") for n in direct), part
        assert "gateway" in names, part
