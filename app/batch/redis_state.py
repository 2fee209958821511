"""The Batch API's state in the Redis a fleet of gateways shares
(``GATEWAY_REDIS_URL``); the files' bytes on ``GATEWAY_BATCH_DIR``, a
volume every replica mounts.

A batch's own keys share one hash slot (``vg:b:{<id>}:…``: a Redis Cluster
runs its scripts and transactions there): its record, its lines (a hash,
each line's JSON with its state, attempts and result), the pending ones (a
list), the claimed ones (a sorted set, each under a lease until its
deadline), its counts and its step claims. A line is claimed by a script
that moves it from pending to claimed and counts the attempt; its gateway
renews the lease while it runs; its end is recorded only by the claim that
holds it (same attempt), so a line a dead gateway's lease let go, run again
by another, is recorded once. ``reclaim`` (any replica, any time) returns
the lines whose lease ran out to pending.
"""

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.batch.state import Change, Record
from app.state.address import Client

_ACTIVE = "vg:batches:active"
_EXPIRING = "vg:files:expiring"
_ENDED = ("completed", "failed", "expired", "cancelled")

_CLAIM = """
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local idx = redis.call('LPOP', KEYS[1])
  if not idx then break end
  redis.call('ZADD', KEYS[2], ARGV[2], idx)
  local line = cjson.decode(redis.call('HGET', KEYS[3], idx))
  line['attempts'] = (line['attempts'] or 0) + 1
  line['state'] = 'running'
  local encoded = cjson.encode(line)
  redis.call('HSET', KEYS[3], idx, encoded)
  out[#out + 1] = encoded
end
return out
"""
_FINISH = """
local line = cjson.decode(redis.call('HGET', KEYS[2], ARGV[1]))
if tonumber(line['attempts']) ~= tonumber(ARGV[4]) or line['state'] ~= 'running' then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
line['state'] = ARGV[2]
if ARGV[2] == 'pending' then
  redis.call('RPUSH', KEYS[3], ARGV[1])
else
  line['result'] = ARGV[3]
  redis.call('HINCRBY', KEYS[4], ARGV[2], 1)
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(line))
return 1
"""
_RECLAIM = """
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
for _, idx in ipairs(gone) do
  redis.call('ZREM', KEYS[1], idx)
  local line = cjson.decode(redis.call('HGET', KEYS[3], idx))
  line['state'] = 'pending'
  redis.call('HSET', KEYS[3], idx, cjson.encode(line))
  redis.call('RPUSH', KEYS[2], idx)
end
return #gone
"""


def _k(batch_id: str, part: str) -> str:
    return f"vg:b:{{{batch_id}}}:{part}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


class RedisState:
    def __init__(self, client: Client, replica: str, directory: Path, lease: float) -> None:
        # redis-py's replies are typed as every kind of reply at once: read
        # here as what each command returns.
        self._r: Any = client
        self._replica = replica
        self.files_dir = directory / "files"
        # A claimed line's lease (``GATEWAY_REDIS_LEASE_SECONDS``, as the
        # replica's own); its gateway renews it every third of it.
        self._lease = lease
        self.renew_every = lease / 3
        self._claim = client.register_script(_CLAIM)
        self._finish = client.register_script(_FINISH)
        self._reclaim = client.register_script(_RECLAIM)

    def path_of(self, file_id: str) -> Path:
        return self.files_dir / file_id

    @property
    def exists(self) -> bool:
        return True

    # --- files --------------------------------------------------------------------

    async def insert_file(self, record: Record) -> None:
        self.files_dir.mkdir(parents=True, exist_ok=True)
        pipe = self._r.pipeline(transaction=False)
        pipe.set(f"vg:file:{record['id']}", json.dumps(record))
        pipe.zadd(f"vg:files:t:{record['tenant']}", {record["id"]: time.time()})
        pipe.incrby(f"vg:filebytes:{record['tenant']}", record["bytes"])
        if record["expires_at"] is not None:
            pipe.zadd(_EXPIRING, {record["id"]: record["expires_at"]})
        await pipe.execute()

    async def _files(self, ids: list[bytes]) -> list[Record]:
        if not ids:
            return []
        pipe = self._r.pipeline(transaction=False)
        for file_id in ids:
            pipe.get(f"vg:file:{file_id.decode()}")
        found = await pipe.execute()
        now = time.time()
        records = [json.loads(raw) for raw in found if raw is not None]
        return [r for r in records if r["expires_at"] is None or r["expires_at"] > now]

    async def get_file(self, tenant: str, file_id: str) -> Record | None:
        found = await self._files([file_id.encode()])
        return found[0] if found and found[0]["tenant"] == tenant else None

    async def list_files(self, tenant: str, purpose: str | None, order: str) -> list[Record]:
        ids = await self._r.zrange(f"vg:files:t:{tenant}", 0, -1, desc=order != "asc")
        records = await self._files(ids)
        return [r for r in records if purpose is None or r["purpose"] == purpose]

    async def tenant_bytes(self, tenant: str) -> int:
        return int(await self._r.get(f"vg:filebytes:{tenant}") or 0)

    async def delete_file(self, tenant: str, file_id: str) -> bool:
        record = await self.get_file(tenant, file_id)
        if record is None or not await self._r.delete(f"vg:file:{file_id}"):
            return False
        await self._forget_file(record)
        return True

    async def _forget_file(self, record: Record) -> None:
        pipe = self._r.pipeline(transaction=False)
        pipe.zrem(f"vg:files:t:{record['tenant']}", record["id"])
        pipe.decrby(f"vg:filebytes:{record['tenant']}", record["bytes"])
        pipe.zrem(_EXPIRING, record["id"])
        await pipe.execute()

    async def expired_files(self) -> list[str]:
        gone = []
        for raw in await self._r.zrangebyscore(_EXPIRING, "-inf", time.time()):
            file_id = raw.decode()
            # The replica whose removal counts removes the bytes.
            if await self._r.zrem(_EXPIRING, file_id):
                record = await self._r.getdel(f"vg:file:{file_id}")
                if record is not None:
                    await self._forget_file(json.loads(record))
                gone.append(file_id)
        return gone

    # --- batches --------------------------------------------------------------------

    async def insert_batch(self, record: Record, key_hash: str | None) -> None:
        batch_id = record["id"]
        await self._r.set(_k(batch_id, "rec"), json.dumps(record))
        if key_hash is not None:
            await self._r.set(_k(batch_id, "key"), key_hash)
        await self._r.zadd(f"vg:batches:t:{record['tenant']}", {batch_id: time.time()})
        await self._r.sadd(_ACTIVE, batch_id)

    async def update_batch(self, batch_id: str, change: Change) -> Record:
        return await self._transact(batch_id, change, lambda pipe: None)

    async def _transact(self, batch_id: str, change: Change, more: Callable[[Any], None]) -> Record:
        key = _k(batch_id, "rec")
        changed: Record = {}

        async def apply(pipe: Any) -> None:
            raw = await pipe.get(key)
            record = json.loads(raw)
            change(record)
            pipe.multi()
            pipe.set(key, json.dumps(record))
            more(pipe)
            changed.clear()
            changed.update(record)

        await self._r.transaction(apply, key)
        if changed.get("status") in _ENDED:
            await self._r.srem(_ACTIVE, batch_id)
        return changed

    async def get_batch(self, tenant: str, batch_id: str) -> Record | None:
        raw = await self._r.get(_k(batch_id, "rec"))
        record = None if raw is None else json.loads(raw)
        return record if record is not None and record["tenant"] == tenant else None

    async def key_of(self, batch_id: str) -> str | None:
        raw = await self._r.get(_k(batch_id, "key"))
        return None if raw is None else str(raw.decode())

    async def _batches(self, ids: list[bytes]) -> list[Record]:
        found = [await self._r.get(_k(i.decode(), "rec")) for i in ids]
        return [json.loads(raw) for raw in found if raw is not None]

    async def list_batches(self, tenant: str) -> list[Record]:
        return await self._batches(await self._r.zrange(f"vg:batches:t:{tenant}", 0, -1, desc=True))

    async def active_batches(self) -> list[Record]:
        records = await self._batches(list(await self._r.smembers(_ACTIVE)))
        return sorted(records, key=lambda r: (r["created_at"], r["id"]))

    # --- lines ---------------------------------------------------------------------

    async def begin(self, batch_id: str, lines: list[tuple[str, str]], change: Change) -> None:
        def keep(pipe: Any) -> None:
            entries = {
                str(i): json.dumps(
                    {"idx": i, "custom_id": c, "body": b, "state": "pending", "attempts": 0}
                )
                for i, (c, b) in enumerate(lines)
            }
            pipe.delete(_k(batch_id, "lines"), _k(batch_id, "pending"))
            for start in range(0, len(lines), 1000):
                chunk = dict(list(entries.items())[start : start + 1000])
                pipe.hset(_k(batch_id, "lines"), mapping=chunk)
                pipe.rpush(_k(batch_id, "pending"), *chunk)

        await self._transact(batch_id, change, keep)

    async def claim_lines(self, batch_id: str, count: int) -> list[Record]:
        deadline = _ms(time.time() + self._lease)
        keys = [_k(batch_id, "pending"), _k(batch_id, "running"), _k(batch_id, "lines")]
        claimed = await self._claim(keys=keys, args=[count, deadline])
        return [json.loads(raw) for raw in claimed]

    async def finish_line(
        self, batch_id: str, idx: int, state: str, result: Record | None, attempt: int = 0
    ) -> None:
        keys = [
            _k(batch_id, "running"),
            _k(batch_id, "lines"),
            _k(batch_id, "pending"),
            _k(batch_id, "counts"),
        ]
        await self._finish(
            keys=keys, args=[idx, state, json.dumps(result) if result else "", attempt]
        )

    async def line_counts(self, batch_id: str) -> dict[str, int]:
        pipe = self._r.pipeline(transaction=False)
        pipe.llen(_k(batch_id, "pending"))
        pipe.zcard(_k(batch_id, "running"))
        pipe.hgetall(_k(batch_id, "counts"))
        pending, running, counts = await pipe.execute()
        ended = {k.decode(): int(v) for k, v in counts.items()}
        return {"pending": pending, "running": running, **ended}

    async def results(self, batch_id: str, state: str) -> list[str]:
        lines = await self._r.hgetall(_k(batch_id, "lines"))
        ordered = sorted(((int(k), json.loads(v)) for k, v in lines.items()), key=lambda x: x[0])
        return [line["result"] for _, line in ordered if line["state"] == state]

    async def expire_pending(self, batch_id: str, result_of: Callable[[str], Record]) -> list[str]:
        pending = _k(batch_id, "pending")
        pipe = self._r.pipeline(transaction=True)
        pipe.lrange(pending, 0, -1)
        pipe.delete(pending)
        idxs, _ = await pipe.execute()
        out = []
        for raw in idxs:
            idx = raw.decode()
            line = json.loads(await self._r.hget(_k(batch_id, "lines"), idx))
            result = json.dumps(result_of(line["custom_id"]))
            line.update(state="expired", result=result)
            await self._r.hset(_k(batch_id, "lines"), idx, json.dumps(line))
            await self._r.hincrby(_k(batch_id, "counts"), "expired", 1)
            out.append(result)
        return out

    async def claim_step(self, batch_id: str, step: str, seconds: float) -> bool:
        key = _k(batch_id, f"step:{step}")
        return bool(await self._r.set(key, self._replica, nx=True, px=_ms(seconds)))

    async def recover(self) -> int:
        return await self.reclaim()

    async def reclaim(self) -> int:
        now = _ms(time.time())
        total = 0
        for raw in await self._r.smembers(_ACTIVE):
            batch_id = raw.decode()
            keys = [_k(batch_id, "running"), _k(batch_id, "pending"), _k(batch_id, "lines")]
            total += int(await self._reclaim(keys=keys, args=[now]))
        return total

    async def renew(self, batch_id: str, idxs: list[int]) -> None:
        if idxs:
            deadline = _ms(time.time() + self._lease)
            await self._r.zadd(
                _k(batch_id, "running"), dict.fromkeys(map(str, idxs), deadline), xx=True
            )

    async def stopping(self, batch_id: str, claims: list[tuple[int, int]]) -> None:
        for idx, attempt in claims:
            await self.finish_line(batch_id, idx, "pending", None, attempt)

    def close(self) -> None:
        return None  # the client is the shared state's, closed with it
