"""``python -m app.keys new``: a key printed once, and its entry."""

import yaml

from app.keys.__main__ import main
from app.keys.file import KeyEntry
from app.keys.ring import KeyRing


def test_a_new_key_and_the_entry_that_finds_it(capsys: object) -> None:
    assert main(["new", "--id", "acme-1", "--tenant", "acme", "--tokens-per-minute", "5000"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    key = out.split("stored): ")[1].split()[0]
    (entry,) = yaml.safe_load(out.split("`keys:`\n")[1])
    ring = KeyRing([KeyEntry.model_validate(entry)])
    found = ring.lookup(key)
    assert found is not None
    assert (found.id, found.tenant, found.tokens_per_minute) == ("acme-1", "acme", 5000)
    assert key not in yaml.safe_dump(entry)
