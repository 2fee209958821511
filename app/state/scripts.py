"""The server-side scripts that keep the fleet's shared state atomic in Redis
(the hold: ``hold_scripts``; the keys' limits: ``limit_scripts``).

Time is Redis's own (``TIME``), so replicas on hosts whose clocks disagree
still agree on leases and windows. The fleet's scripts start with
``leases.PRELUDE``: what replicas hold lives in pools whose totals are kept
as they change, a replica counts while its lease is alive and is taken out
by the first call that finds it expired, and the fair order's waiting
tenants are a sorted set by clock — so what a call costs grows with what it
changes (and with the replicas that expired since the last call), not with
the number of live replicas. Keys: ``app.state.keys``.
"""

from app.state.leases import PRELUDE

# KEYS: a pool (keys.engine)
# ARGV: replica, lease_ms, then what it gives back (one amount per count)
# Gives back part of what the replica holds (never below nothing).
RELEASE = (
    PRELUDE
    + """
local delta = {}
for i = 3, #ARGV do delta[#delta + 1] = -tonumber(ARGV[i]) end
pool_add(pool_at(1, #delta), ARGV[1], delta, now_ms() + tonumber(ARGV[2]))
return 1
"""
)

# A heartbeat's parts, as functions: the fleet's (the lease renewed, lapsed
# replicas taken out and, after a minute, forgotten; the live replicas) and
# one engine's (what the replica holds written — the truth, over the mirror —
# or on a sweep lapsed replicas taken out, or only read; the total).
_BEATS = """
local function fleet_beat(f, replica, deadline, now)
  fleet_renew(f, replica, deadline)
  fleet_reclaim(f, now)
  fleet_forget(f, now)
  return redis.call('ZCARD', f.alive)
end

local function engine_beat(p, replica, v, sweep, deadline, now)
  if v or sweep then
    pool_reclaim(p, now)
    pool_forget(p, now)
  end
  if v then return pool_set(p, replica, v, deadline) end
  return counts(redis.call('HGET', p.held, ''), 3)
end
"""

# KEYS: keys.fleet_state(), then the pools (keys.engine) of the engines
#       written, then of the engines read (on a sweep; else only the first
#       key of each, its holdings)
# ARGV: replica, lease_ms, sweep (1: take lapsed replicas out of the engines
#       read too), then for each engine written its held blocks, sequences,
#       requests (what this replica holds)
# Renews the lease, writes the replica's holdings where it holds something
# (or held something), and returns the number of live replicas and the
# fleet's totals per engine (those written, then those read). An engine
# only read costs one read, but on a sweep.
HEARTBEAT = (
    PRELUDE
    + _BEATS
    + """
local now = now_ms()
local replica = ARGV[1]
local deadline = now + tonumber(ARGV[2])
local out = {fleet_beat(fleet_at(1), replica, deadline, now)}
local first = 3 + 4 * CLASSES
local written = (#ARGV - 3) / 3
local sweep = ARGV[3] == '1'
local function add(total)
  for _, x in ipairs(total) do out[#out + 1] = x end
end
for e = 0, written - 1 do
  local a = 4 + 3 * e
  local v = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])}
  add(engine_beat(pool_at(first + 3 * e, 3), replica, v, true, deadline, now))
end
-- The engines read: each its pool's three keys on a sweep, else its holdings' key.
local step = sweep and 3 or 1
for k = first + 3 * written, #KEYS, step do
  add(engine_beat(pool_at(k, 3), replica, nil, sweep, deadline, now))
end
return out
"""
)

# A Redis Cluster's heartbeat, in one script per slot:
# KEYS: keys.fleet_state(); ARGV: replica, lease_ms. The live replicas.
FLEET_BEAT = (
    PRELUDE
    + _BEATS
    + """
local now = now_ms()
return fleet_beat(fleet_at(1), ARGV[1], now + tonumber(ARGV[2]), now)
"""
)

# KEYS: one engine's pool (keys.engine); ARGV: replica, lease_ms, sweep (1 or
# 0), then what the replica holds there if it writes it (blocks, sequences,
# requests). The engine's totals.
ENGINE_BEAT = (
    PRELUDE
    + _BEATS
    + """
local now = now_ms()
local v = nil
if #ARGV > 3 then v = {tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])} end
return engine_beat(pool_at(1, 3), ARGV[1], v, ARGV[3] == '1', now + tonumber(ARGV[2]), now)
"""
)

# KEYS: keys.fleet_state()
# ARGV: replica, lease_ms, then pairs: class (1-based), the tenants waiting at
#       this replica in it, one per line (empty: none)
# Renews the lease and tells the fleet who waits here: what changed since
# the replica last said so is counted in or out.
PUBLISH_WAITING = (
    PRELUDE
    + """
local replica = ARGV[1]
local f = fleet_at(1)
fleet_renew(f, replica, now_ms() + tonumber(ARGV[2]))
for i = 3, #ARGV, 2 do
  local c = f.classes[tonumber(ARGV[i])]
  local before, after = {}, {}
  for _, t in ipairs(lines(redis.call('HGET', c.waiting, replica))) do before[t] = true end
  for _, t in ipairs(lines(ARGV[i + 1])) do after[t] = true end
  for t in pairs(before) do
    if not after[t] then queue(c, t, -1) end
  end
  for t in pairs(after) do
    if not before[t] then queue(c, t, 1) end
  end
  if ARGV[i + 1] == '' then
    redis.call('HDEL', c.waiting, replica)
  else
    redis.call('HSET', c.waiting, replica, ARGV[i + 1])
  end
end
return 1
"""
)
