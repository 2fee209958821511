"""The server-side scripts that keep shared state atomic in Redis.

Time is Redis's own (``TIME``), so replicas on hosts whose clocks disagree
still agree on leases and windows. A replica is alive while its entry in
``{gw}:alive`` (score: lease expiry, ms) is in the future; what a replica
holds on an engine is a field of that engine's hashes, and only the fields
of live replicas count — a replica killed without a drain stops counting
when its lease runs out, with nothing to clean up first.
"""

# KEYS: alive, blocks:{engine}, sequences:{engine}, requests:{engine},
#       fair:{class}, waiting:{class}, then waiting:{c} of every higher class
# ARGV: replica, blocks, sequences, budget_blocks (-1: unknown), max_sequences,
#       lease_ms, tenant, tokens, then the other tenants waiting at this
#       replica in the class
# Holds the request on the engine if it is the fleet's turn for it and it
# fits what every live replica holds, and charges its tenant's fair-share
# clock. The turn is decided on the fleet's clocks alone: no live replica
# has a request waiting in a higher class, and no tenant waiting anywhere in
# this class starts earlier (each replica publishes the tenants waiting
# there in waiting:{class}, one per line; this replica's own are in ARGV,
# current). A replica picks its candidate by its own copy of the clocks,
# which lags what the others admitted; the copy does not decide the turn.
# Returns {0 refused for room / 1 held / 2 a tenant waiting at another
# replica goes first / 3 one waiting here goes first, fleet blocks, fleet
# sequences, fleet requests (before this one), tenant's clock, class clock},
# and for 3 the fleet's start of this tenant and of each one waiting here
# (pairs), for the replica to decide again with.
HOLD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replica = ARGV[1]
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), replica)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
local function total(key)
  local sum = 0
  for _, v in ipairs(redis.call('HMGET', key, unpack(live))) do
    if v then sum = sum + tonumber(v) end
  end
  return sum
end
local blocks, sequences, requests = total(KEYS[2]), total(KEYS[3]), total(KEYS[4])
local vtime = tonumber(redis.call('HGET', KEYS[5], '') or '0')
local function start(tenant)
  return math.max(tonumber(redis.call('HGET', KEYS[5], tenant) or '0'), vtime)
end
local mine = start(ARGV[7])
local earlier = false
local starts = {ARGV[7], tostring(mine)}
for i = 9, #ARGV do
  local clock = start(ARGV[i])
  if clock < mine then earlier = true end
  starts[#starts + 1] = ARGV[i]
  starts[#starts + 1] = tostring(clock)
end
if earlier then
  local out = {3, blocks, sequences, requests, '0', tostring(vtime)}
  for _, v in ipairs(starts) do out[#out + 1] = v end
  return out
end
for i = 6, #KEYS do
  local waiting = redis.call('HMGET', KEYS[i], unpack(live))
  for j, tenants in ipairs(waiting) do
    if tenants and live[j] ~= replica then
      for tenant in string.gmatch(tenants, '[^\\n]+') do
        if i > 6 or (tenant ~= ARGV[7] and start(tenant) < mine) then
          return {2, blocks, sequences, requests, '0', '0'}
        end
      end
    end
  end
end
local want_blocks, want_sequences = tonumber(ARGV[2]), tonumber(ARGV[3])
local budget, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local fits = requests == 0 or (
  (budget < 0 or blocks + want_blocks <= budget) and sequences + want_sequences <= cap)
if not fits then
  return {0, blocks, sequences, requests, '0', '0'}
end
redis.call('HINCRBY', KEYS[2], replica, want_blocks)
redis.call('HINCRBY', KEYS[3], replica, want_sequences)
redis.call('HINCRBY', KEYS[4], replica, 1)
redis.call('HSET', KEYS[5], ARGV[7], tostring(mine + tonumber(ARGV[8])), '', tostring(mine))
return {1, blocks, sequences, requests, tostring(mine + tonumber(ARGV[8])), tostring(mine)}
"""

# KEYS: alive, then for each engine its blocks, sequences, requests hashes
# ARGV: replica, lease_ms, then for each engine its held blocks, sequences,
#       requests (what this replica holds: the truth, written over the mirror)
# Renews the lease, writes the replica's holdings, forgets replicas whose
# lease ran out long ago, and returns the fleet's totals per engine and the
# number of live replicas.
HEARTBEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replica = ARGV[1]
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), replica)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 60000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
local out = {#live}
for i = 2, #KEYS do
  redis.call('HSET', KEYS[i], replica, ARGV[i + 1])
  for _, r in ipairs(dead) do redis.call('HDEL', KEYS[i], r) end
  local sum = 0
  for _, v in ipairs(redis.call('HMGET', KEYS[i], unpack(live))) do
    if v then sum = sum + tonumber(v) end
  end
  table.insert(out, sum)
end
if #dead > 0 then redis.call('ZREM', KEYS[1], unpack(dead)) end
return out
"""

# KEYS: the key's token log (ZSET charge -> ms), its charges (HASH charge ->
#       tokens)
# ARGV: charge id, tokens, limit, window_ms
# Drops charges older than the window, then adds this one if the rest leaves
# room. Returns {allowed, total before, ms until it would fit (0 if allowed),
# ms until the log is empty}.
RESERVE_TOKENS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[4])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #old > 0 then
  redis.call('ZREM', KEYS[1], unpack(old))
  redis.call('HDEL', KEYS[2], unpack(old))
end
local charges = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local total = 0
local sizes = {}
for i = 1, #charges, 2 do
  local size = tonumber(redis.call('HGET', KEYS[2], charges[i]) or '0')
  sizes[#sizes + 1] = {size, tonumber(charges[i + 1])}
  total = total + size
end
local tokens, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local reset = 0
if #sizes > 0 then reset = sizes[#sizes][2] + window - now end
if total + tokens <= limit then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], tokens)
  redis.call('PEXPIRE', KEYS[1], window)
  redis.call('PEXPIRE', KEYS[2], window)
  return {1, total, 0, window}
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
return {0, total, wait, reset}
"""

# KEYS: the key's charges (HASH charge -> tokens)
# ARGV: charge id, tokens
# Replaces a charge's reservation with what it used, if it is still in the
# window.
SETTLE_TOKENS = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 1
"""

# KEYS: alive, slots:{key} (HASH replica -> slots held)
# ARGV: replica, limit, lease_ms
# Takes a slot if the live replicas hold fewer than the limit.
ACQUIRE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local live = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
local held = 0
for _, v in ipairs(redis.call('HMGET', KEYS[2], unpack(live))) do
  if v then held = held + tonumber(v) end
end
if held >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
return 1
"""
