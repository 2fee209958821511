"""The server-side scripts that keep an API key's limits atomic in Redis:
its concurrent slots (a pool under the replicas' leases, ``leases.PRELUDE``)
and its settleable token log. Each touches the keys of one API key, all in
that key's slot (``app.state.layout``), so they run as they are on a Redis
Cluster.
"""

from app.state.leases import PRELUDE

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

# KEYS: one key's slots pool (keys.slots)
# ARGV: replica, lease_ms, the slots it holds of the key (the truth)
# Writes what the replica holds and renews its lease there.
SET_SLOTS = (
    PRELUDE
    + """
local now = now_ms()
local p = pool_at(1, 1)
pool_reclaim(p, now)
pool_forget(p, now)
pool_set(p, ARGV[1], {tonumber(ARGV[3])}, now + tonumber(ARGV[2]))
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
