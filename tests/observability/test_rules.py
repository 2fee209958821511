"""Prometheus config and rules pass promtool, and every alert has a unit test."""

import shutil
import subprocess
from pathlib import Path

import yaml

from deploy.local import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"


def promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    assert tool, "promtool is missing: install Debian's prometheus package (.ci/run does)"
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_local_config_is_valid() -> None:
    out = promtool("check", "config", str(PROMETHEUS / "prometheus.local.yml"))
    assert "2 rule files found" in out


def test_the_rules_are_valid() -> None:
    promtool("check", "rules", *map(str, sorted((PROMETHEUS / "rules").glob("*.yml"))))


def test_every_alert_fires_in_a_rule_unit_test() -> None:
    tests = PROMETHEUS / "tests" / "alerts_test.yml"
    promtool("test", "rules", str(tests))
    alerts = {
        rule["alert"]
        for group in yaml.safe_load((PROMETHEUS / "rules" / "alerts.yml").read_text())["groups"]
        for rule in group["rules"]
    }
    fired = {
        check["alertname"]
        for case in yaml.safe_load(tests.read_text())["tests"]
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert alerts == fired


def recording_rules() -> dict[str, str]:
    rules: dict[str, str] = {}
    for path in sorted((PROMETHEUS / "rules").glob("*.yml")):
        for group in yaml.safe_load(Path(path).read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    rules[rule["record"]] = rule["expr"]
    return rules


def test_recording_rules_read_gateway_and_engine_series() -> None:
    for name, expr in recording_rules().items():
        assert "gateway_" in expr or "vllm:" in expr, name
