"""The hold: the server-side script that admits a request into the fleet's
shared state, and its parts as a Redis Cluster runs them (``scripts`` says
what every fleet script shares).
"""

from app.state.leases import PRELUDE

# The hold, in parts that each touch the keys of one slot: the fleet's (the
# turn and the tenant's charge) or the engine's (the room). One Redis runs
# them as one script (HOLD); a Redis Cluster runs a script on one slot's keys
# only, so there they are two (TURN, then PLACE), and a PLACE refused for room
# is followed by UNCHARGE: the request goes back to the front of its queue
# with its tenant's clock as it was.
#
# ARGV (all three): replica, blocks, sequences, budget_blocks (-1: unknown),
#   max_sequences, lease_ms, tenant, tokens, class (1-based, in priority
#   order), then the other tenants waiting at this replica in the class.
_ARGS = """
local now = now_ms()
local replica, tenant = ARGV[1], ARGV[7]
local deadline = now + tonumber(ARGV[6])
local class = tonumber(ARGV[9])
"""

# The fleet's keys from KEYS[FLEET]: renew this replica's lease there.
_FLEET = """
local f = fleet_at(FLEET)
fleet_renew(f, replica, deadline)
fleet_reclaim(f, now)
local c = f.classes[class]
"""

# The engine's pool from KEYS[POOL]: what the live replicas hold there.
_ROOM = """
local p = pool_at(POOL, 3)
local renewed = pool_renew(p, replica, deadline)
pool_reclaim(p, now)
local held, total = pool_read(p, replica)
local blocks, sequences, requests = total[1], total[2], total[3]
"""

# Whether it is the fleet's turn for this tenant. The turn is decided on the
# fleet's clocks alone: no tenant waits at another live replica in a higher
# class, and no other tenant waiting at one in this class starts earlier (the
# waiting tenants by clock: one range query; this replica's own are in ARGV,
# current, and what it published is not counted against it). A replica picks
# its candidate by its own copy of the clocks, which lags what the others
# admitted; the copy does not decide the turn.
_TURN = """
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
"""

# Whether the request fits what every live replica holds on the engine; if
# so, held there.
_PLACE = """
local want_blocks, want_sequences = tonumber(ARGV[2]), tonumber(ARGV[3])
local budget, cap = tonumber(ARGV[4]), tonumber(ARGV[5])
local fits = requests == 0 or (
  (budget < 0 or blocks + want_blocks <= budget) and sequences + want_sequences <= cap)
if not fits then
  return {0, blocks, sequences, requests, '0', '0'}
end
local now_held = {held[1] + want_blocks, held[2] + want_sequences, held[3] + 1}
pool_write(p, replica, held, now_held, total, deadline, renewed)
"""

# The tenant's fair-share clock charged.
_CHARGE = """
local served = tostring(mine + tonumber(ARGV[8]))
redis.call('HSET', c.fair, tenant, served, '', tostring(mine))
redis.call('ZADD', c.queued, 'XX', served, tenant)
"""

# KEYS: keys.fleet_state(), then the engine's pool (keys.engine)
# Holds the request on the engine if it is the fleet's turn for it and it
# fits, and charges its tenant's fair-share clock.
# Returns {0 refused for room / 1 held / 2 a tenant waiting at another
# replica goes first / 3 one waiting here goes first, fleet blocks, fleet
# sequences, fleet requests (before this one), tenant's clock, class clock},
# and for 3 the fleet's start of this tenant and of each one waiting here
# (pairs), for the replica to decide again with.
HOLD = (
    PRELUDE
    + "local FLEET, POOL = 1, 3 + 4 * CLASSES\n"
    + _ARGS
    + _FLEET
    + _ROOM
    + _TURN
    + _PLACE
    + _CHARGE
    + "return {1, blocks, sequences, requests, served, tostring(mine)}\n"
)

# KEYS: keys.fleet_state()
# HOLD's turn and charge: as HOLD's answer without the engine's totals (0),
# and when charged, the class clock before the charge (for UNCHARGE).
TURN = (
    PRELUDE
    + "local FLEET = 1\nlocal blocks, sequences, requests = 0, 0, 0\n"
    + _ARGS
    + _FLEET
    + _TURN
    + _CHARGE
    + "return {1, 0, 0, 0, served, tostring(mine), tostring(vtime)}\n"
)

# KEYS: the engine's pool (keys.engine)
# HOLD's room: {0 refused / 1 held, fleet blocks, sequences, requests}.
PLACE = (
    PRELUDE
    + "local POOL = 1\n"
    + _ARGS
    + _ROOM
    + _PLACE
    + ("return {1, blocks, sequences, requests}\n")
)

# KEYS: keys.fleet_state()
# ARGV: tenant, tokens, class, the class clock TURN set (its answer's), the
#       class clock before it
# Undoes TURN's charge: the tenant's clock back by its tokens (a charge made
# since by another replica stays), the class clock back if nothing moved it.
UNCHARGE = (
    PRELUDE
    + """
local c = fleet_at(1).classes[tonumber(ARGV[3])]
local tenant = ARGV[1]
local clock = tostring(tonumber(redis.call('HGET', c.fair, tenant) or '0') - tonumber(ARGV[2]))
redis.call('HSET', c.fair, tenant, clock)
redis.call('ZADD', c.queued, 'XX', clock, tenant)
if redis.call('HGET', c.fair, '') == ARGV[4] then redis.call('HSET', c.fair, '', ARGV[5]) end
return 1
"""
)
