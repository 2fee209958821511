"""The Lua that every fleet script starts with: Redis's clock, leases,
pools and the fleet's waiting tenants, kept so that no call's cost grows
with the number of live replicas.

Leases. A replica counts while its lease is alive (a sorted set, replica →
deadline in ms of Redis's own clock). The first call that finds a lease run
out takes that replica's part out (``reclaim``: one range query, then work
per expired replica only) and keeps it aside, lapsed, for a minute: a
replica that was only slow counts again, whole, when it renews; after the
minute its part is dropped (by heartbeats, off the admission path). Nothing
trusts a replica to clean up after itself.

Pools: what replicas hold of one thing (an engine's blocks, sequences and
requests; an API key's concurrent slots): a hash with a field per replica
(its counts, separated by spaces) and the field ``''``, their total over the
replicas whose lease is alive — kept as they change (a hold adds, a release
subtracts, a reclaim takes a replica's part out), never summed on the way.

The fleet: its replicas' leases, and per priority class the tenants
waiting at each replica (published by it, one per line), how many live
replicas each tenant waits at, and the waiting tenants in a sorted set by
their fair-share clock: whether a tenant waiting anywhere starts before a
given one is one range query, however many replicas and tenants wait.
"""

from app.request.identity import PRIORITIES

PRELUDE = (
    """
local LAPSE_MS = 60000
local CLASSES = """
    + str(len(PRIORITIES))
    + """

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Renews a lease; true if the replica had lapsed (its part must count again).
local function renew(leases, lapsed, replica, deadline)
  if redis.call('ZADD', leases, deadline, replica) == 0 then return false end
  return redis.call('ZREM', lapsed, replica) == 1
end

-- Takes out (uncount) the part of every replica whose lease ran out, and
-- keeps it aside as lapsed. One range query when none did.
local function reclaim(leases, lapsed, now, uncount)
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', '(' .. now, 'WITHSCORES')
  for i = 1, #expired, 2 do
    uncount(expired[i])
    redis.call('ZREM', leases, expired[i])
    redis.call('ZADD', lapsed, expired[i + 1], expired[i])
  end
end

-- Drops (forget) the parts lapsed over LAPSE_MS ago.
local function forget_lapsed(lapsed, now, forget)
  local gone = redis.call('ZRANGEBYSCORE', lapsed, '-inf', '(' .. (now - LAPSE_MS))
  for _, replica in ipairs(gone) do
    forget(replica)
    redis.call('ZREM', lapsed, replica)
  end
end

-- Pools ----------------------------------------------------------------------

local function counts(text, n)
  local v, i = {}, 0
  if text then
    for x in string.gmatch(text, '%S+') do
      i = i + 1
      v[i] = tonumber(x)
    end
  end
  for j = i + 1, n do v[j] = 0 end
  return v
end

local function is_zero(v)
  for _, x in ipairs(v) do
    if x ~= 0 then return false end
  end
  return true
end

-- The pool whose keys (held, leases, lapsed) start at KEYS[first].
local function pool_at(first, n)
  return {held = KEYS[first], leases = KEYS[first + 1], lapsed = KEYS[first + 2], n = n}
end

-- What the replica holds, and the total, in one read.
local function pool_read(p, replica)
  local both = redis.call('HMGET', p.held, replica, '')
  return counts(both[1], p.n), counts(both[2], p.n)
end

-- The total moved by sign * v, written.
local function pool_shift(p, v, sign)
  local total = counts(redis.call('HGET', p.held, ''), p.n)
  for j = 1, p.n do total[j] = total[j] + sign * v[j] end
  redis.call('HSET', p.held, '', table.concat(total, ' '))
end

-- Writes what a counted (or new) replica holds now, v instead of old, and
-- the total moved by the difference; holding nothing, it leaves the pool.
-- renewed: its lease already runs to deadline.
local function pool_write(p, replica, old, v, total, deadline, renewed)
  for j = 1, p.n do total[j] = total[j] + v[j] - old[j] end
  if is_zero(v) then
    redis.call('HDEL', p.held, replica)
    redis.call('ZREM', p.leases, replica)
    redis.call('HSET', p.held, '', table.concat(total, ' '))
    return
  end
  redis.call('HSET', p.held, replica, table.concat(v, ' '), '', table.concat(total, ' '))
  if not renewed then redis.call('ZADD', p.leases, deadline, replica) end
end

local function pool_reclaim(p, now)
  reclaim(p.leases, p.lapsed, now, function(r)
    pool_shift(p, counts(redis.call('HGET', p.held, r), p.n), -1)
  end)
end

local function pool_forget(p, now)
  forget_lapsed(p.lapsed, now, function(r) redis.call('HDEL', p.held, r) end)
end

-- A sign of life: a replica holding something (counted or lapsed) counts,
-- its lease renewed to deadline; whether it does.
local function pool_renew(p, replica, deadline)
  -- (ZADD XX CH alone would not tell: it answers 0 for a deadline unchanged
  -- within the same millisecond.)
  if redis.call('ZSCORE', p.leases, replica) then
    redis.call('ZADD', p.leases, deadline, replica)
    return true
  end
  if redis.call('ZREM', p.lapsed, replica) == 1 then
    redis.call('ZADD', p.leases, deadline, replica)
    pool_shift(p, counts(redis.call('HGET', p.held, replica), p.n), 1)
    return true
  end
  return false
end

-- Sets what the replica holds (the truth) and renews its lease; the total.
local function pool_set(p, replica, v, deadline)
  local counted = redis.call('ZSCORE', p.leases, replica)
  if not counted and redis.call('ZREM', p.lapsed, replica) == 0 and is_zero(v) then
    -- Not in the pool, and stays out.
    return counts(redis.call('HGET', p.held, ''), p.n)
  end
  local old, total = pool_read(p, replica)
  -- A lapsed part is not in the total.
  if not counted then old = counts(nil, p.n) end
  pool_write(p, replica, old, v, total, deadline, false)
  return total
end

-- Adds delta (negative: gives back) to what the replica holds, never below 0.
local function pool_add(p, replica, delta, deadline)
  local renewed = pool_renew(p, replica, deadline)
  local old, total = pool_read(p, replica)
  local v = {}
  for j = 1, p.n do v[j] = math.max(0, old[j] + delta[j]) end
  pool_write(p, replica, old, v, total, deadline, renewed)
end

-- The fleet -------------------------------------------------------------------

-- The fleet's keys (keys.fleet_state()), starting at KEYS[first].
local function fleet_at(first)
  local f = {alive = KEYS[first], lapsed = KEYS[first + 1], classes = {}}
  for k = 1, CLASSES do
    local i = first + 2 + (k - 1) * 4
    f.classes[k] = {
      waiting = KEYS[i], queuers = KEYS[i + 1], queued = KEYS[i + 2], fair = KEYS[i + 3]}
  end
  return f
end

local function lines(text)
  local out = {}
  if text then
    for line in string.gmatch(text, '[^\\n]+') do out[#out + 1] = line end
  end
  return out
end

-- One more (sign 1) or one fewer (-1) live replica where the tenant waits.
local function queue(c, tenant, sign)
  local n = redis.call('HINCRBY', c.queuers, tenant, sign)
  if n <= 0 then
    redis.call('HDEL', c.queuers, tenant)
    redis.call('ZREM', c.queued, tenant)
  elseif n == 1 and sign > 0 then
    redis.call('ZADD', c.queued, redis.call('HGET', c.fair, tenant) or '0', tenant)
  end
end

-- Counts (1) or uncounts (-1) the tenants a replica published as waiting.
local function fleet_count(f, replica, sign)
  for _, c in ipairs(f.classes) do
    for _, tenant in ipairs(lines(redis.call('HGET', c.waiting, replica))) do
      queue(c, tenant, sign)
    end
  end
end

local function fleet_renew(f, replica, deadline)
  if renew(f.alive, f.lapsed, replica, deadline) then fleet_count(f, replica, 1) end
end

local function fleet_reclaim(f, now)
  reclaim(f.alive, f.lapsed, now, function(r) fleet_count(f, r, -1) end)
end

local function fleet_forget(f, now)
  forget_lapsed(f.lapsed, now, function(r)
    for _, c in ipairs(f.classes) do redis.call('HDEL', c.waiting, r) end
  end)
end
"""
)
