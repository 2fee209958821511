"""The server-side scripts that keep shared state atomic in Redis.

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

# KEYS: keys.fleet_state(), then the engine's pool (keys.engine)
# ARGV: replica, blocks, sequences, budget_blocks (-1: unknown), max_sequences,
#       lease_ms, tenant, tokens, class (1-based, in priority order), then the
#       other tenants waiting at this replica in the class
# Holds the request on the engine if it is the fleet's turn for it and it
# fits what every live replica holds, and charges its tenant's fair-share
# clock. The turn is decided on the fleet's clocks alone: no tenant waits at
# another live replica in a higher class, and no other tenant waiting at one
# in this class starts earlier (the waiting tenants by clock: one range
# query; this replica's own are in ARGV, current, and what it published is
# not counted against it). A replica picks its candidate by its own copy of
# the clocks, which lags what the others admitted; the copy does not decide
# the turn.
# Returns {0 refused for room / 1 held / 2 a tenant waiting at another
# replica goes first / 3 one waiting here goes first, fleet blocks, fleet
# sequences, fleet requests (before this one), tenant's clock, class clock},
# and for 3 the fleet's start of this tenant and of each one waiting here
# (pairs), for the replica to decide again with.
HOLD = (
    PRELUDE
    + """
local now = now_ms()
local replica, tenant = ARGV[1], ARGV[7]
local deadline = now + tonumber(ARGV[6])
local f = fleet_at(1)
fleet_renew(f, replica, deadline)
fleet_reclaim(f, now)
local p = pool_at(3 + 4 * CLASSES, 3)
local renewed = pool_renew(p, replica, deadline)
pool_reclaim(p, now)
local held, total = pool_read(p, replica)
local blocks, sequences, requests = total[1], total[2], total[3]
local class = tonumber(ARGV[9])
local c = f.classes[class]
-- The class's clock, this tenant's and the rivals' (ARGV[10]...), in one read.
local names = {'', tenant}
for i = 10, #ARGV do names[#names + 1] = ARGV[i] end
local clocks = redis.call('HMGET', c.fair, unpack(names))
local vtime = tonumber(clocks[1] or '0')
local function start(i)
  return math.max(tonumber(clocks[i] or '0'), vtime)
end
local mine = start(2)
local earlier = false
local starts = {tenant, tostring(mine)}
for i = 3, #names do
  local clock = start(i)
  if clock < mine then earlier = true end
  starts[#starts + 1] = names[i]
  starts[#starts + 1] = tostring(clock)
end
if earlier then
  local out = {3, blocks, sequences, requests, '0', tostring(vtime)}
  for _, v in ipairs(starts) do out[#out + 1] = v end
  return out
end
-- What this replica published as waiting in class k (read if needed).
local here = {}
local function published_here(k, name)
  if not here[k] then
    here[k] = {}
    for _, t in ipairs(lines(redis.call('HGET', f.classes[k].waiting, replica))) do
      here[k][t] = true
    end
  end
  return here[k][name]
end
-- Whether a tenant waits at another live replica in class k (below: whose
-- clock is below it, and which is not this tenant).
local function waits_elsewhere(k, below)
  local queued, queuers = f.classes[k].queued, f.classes[k].queuers
  local offset = 0
  while true do
    local batch
    if below then
      batch = redis.call('ZRANGEBYSCORE', queued, '-inf', '(' .. below, 'LIMIT', offset, 8)
    else
      batch = redis.call('ZRANGE', queued, offset, offset + 7)
    end
    for _, name in ipairs(batch) do
      if not (below and name == tenant) then
        local at = tonumber(redis.call('HGET', queuers, name) or '0')
        if at > 1 or not published_here(k, name) then return true end
      end
    end
    if #batch < 8 then return false end
    offset = offset + 8
  end
end
-- A start below the class clock is the clock: nobody starts before it.
local turn = not (mine > vtime and waits_elsewhere(class, mine))
for k = 1, class - 1 do
  if turn and waits_elsewhere(k, nil) then turn = false end
end
if not turn then
  return {2, blocks, sequences, requests, '0', '0'}
end
local want_blocks, want_sequences = tonumber(ARGV[2]), tonumber(ARGV[3])
local budget, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local fits = requests == 0 or (
  (budget < 0 or blocks + want_blocks <= budget) and sequences + want_sequences <= cap)
if not fits then
  return {0, blocks, sequences, requests, '0', '0'}
end
local now_held = {held[1] + want_blocks, held[2] + want_sequences, held[3] + 1}
pool_write(p, replica, held, now_held, total, deadline, renewed)
local served = tostring(mine + tonumber(ARGV[8]))
redis.call('HSET', c.fair, tenant, served, '', tostring(mine))
redis.call('ZADD', c.queued, 'XX', served, tenant)
return {1, blocks, sequences, requests, served, tostring(mine)}
"""
)

# KEYS: a pool (keys.engine, keys.slots)
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

# KEYS: keys.fleet_state(), then the pools (keys.engine) of the engines
#       written, then of the engines read (on a sweep; else only the first
#       key of each, its holdings)
# ARGV: replica, lease_ms, sweep (1: take lapsed replicas out of the engines
#       read too), then for each engine written its held blocks, sequences,
#       requests (what this replica holds: the truth, written over the mirror)
# Renews the lease, writes the replica's holdings where it holds something
# (or held something), and returns the number of live replicas and the
# fleet's totals per engine (those written, then those read). An engine
# written is first rid of what lapsed replicas held there (and of what
# lapsed long ago); one read is, on a sweep; else it costs one read.
HEARTBEAT = (
    PRELUDE
    + """
local now = now_ms()
local replica = ARGV[1]
local deadline = now + tonumber(ARGV[2])
local f = fleet_at(1)
fleet_renew(f, replica, deadline)
fleet_reclaim(f, now)
fleet_forget(f, now)
local out = {redis.call('ZCARD', f.alive)}
local first = 3 + 4 * CLASSES
local written = (#ARGV - 3) / 3
local sweep = ARGV[3] == '1'
local function add(total)
  for _, x in ipairs(total) do out[#out + 1] = x end
end
for e = 0, written - 1 do
  local p = pool_at(first + 3 * e, 3)
  pool_reclaim(p, now)
  pool_forget(p, now)
  local a = 4 + 3 * e
  add(pool_set(p, replica, {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])},
    deadline))
end
-- The engines read: each its pool's three keys on a sweep, else its holdings' key.
local step = sweep and 3 or 1
for k = first + 3 * written, #KEYS, step do
  if sweep then
    local p = pool_at(k, 3)
    pool_reclaim(p, now)
    pool_forget(p, now)
  end
  add(counts(redis.call('HGET', KEYS[k], ''), 3))
end
return out
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

# KEYS: the key's slots pool (keys.slots)
# ARGV: replica, limit, lease_ms
# Takes a slot if the live replicas hold fewer than the limit.
ACQUIRE_SLOT = (
    PRELUDE
    + """
local now = now_ms()
local deadline = now + tonumber(ARGV[3])
local p = pool_at(1, 1)
local renewed = pool_renew(p, ARGV[1], deadline)
pool_reclaim(p, now)
local held, total = pool_read(p, ARGV[1])
if total[1] >= tonumber(ARGV[2]) then return 0 end
pool_write(p, ARGV[1], held, {held[1] + 1}, total, deadline, renewed)
return 1
"""
)

# KEYS: one or more keys' slots pools (keys.slots)
# ARGV: replica, lease_ms, then the slots it holds of each (the truth)
# Writes what the replica holds and renews its leases there.
SET_SLOTS = (
    PRELUDE
    + """
local now = now_ms()
local deadline = now + tonumber(ARGV[2])
for i = 0, #KEYS / 3 - 1 do
  local p = pool_at(1 + 3 * i, 1)
  pool_reclaim(p, now)
  pool_forget(p, now)
  pool_set(p, ARGV[1], {tonumber(ARGV[3 + i])}, deadline)
end
return 1
"""
)

# KEYS: the key's token log (ZSET charge -> ms), its charges (HASH charge ->
#       tokens), what its unsettled charges left unreserved (HASH charge ->
#       tokens): keys.tokens
# ARGV: charge id, estimate, worst case, limit, window_ms
# Drops charges older than the window, then charges this one its estimate
# raised to the key's unreserved tokens, at most its worst case
# (base.reservation), if the rest leaves room; what it leaves unreserved of
# its worst case joins the key's. Returns {allowed, total before, ms until it
# would fit (0 if allowed), ms until the log is empty, tokens charged}.
RESERVE_TOKENS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[5])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #old > 0 then
  redis.call('ZREM', KEYS[1], unpack(old))
  redis.call('HDEL', KEYS[2], unpack(old))
  redis.call('HDEL', KEYS[3], unpack(old))
end
local charges = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local total = 0
local sizes = {}
for i = 1, #charges, 2 do
  local size = tonumber(redis.call('HGET', KEYS[2], charges[i]) or '0')
  sizes[#sizes + 1] = {size, tonumber(charges[i + 1])}
  total = total + size
end
local unreserved = 0
for _, left in ipairs(redis.call('HVALS', KEYS[3])) do
  unreserved = unreserved + tonumber(left)
end
local estimate, worst, limit = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local tokens = math.min(worst, math.max(estimate, unreserved))
local reset = 0
if #sizes > 0 then reset = sizes[#sizes][2] + window - now end
if total + tokens <= limit then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], tokens)
  if worst > tokens then
    redis.call('HSET', KEYS[3], ARGV[1], worst - tokens)
  end
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], window) end
  return {1, total, 0, window, tokens}
end
local left = total
local wait = window
for _, entry in ipairs(sizes) do
  left = left - entry[1]
  if left + tokens <= limit then
    wait = entry[2] + window - now
    break
  end
end
return {0, total, wait, reset, 0}
"""

# KEYS: the key's charges and unreserved tokens (keys.tokens without the log)
# ARGV: charge id, tokens
# Replaces a charge's reservation with what it used, if it is still in the
# window; what it left unreserved leaves the key's.
SETTLE_TOKENS = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
"""
