"""Every Lua script evalfleet runs in Redis, each one atomic step of the store (rq's scripts.py).

Each is headed by what its KEYS and ARGV are (key names: core.store.keys) and
returns a named outcome rather than a number to decode. Times come from the
Redis server's clock (TIME), so the workers' and the scheduler's clocks never
have to agree. A lease is stored as "EXPIRY HOLDER" (core.store.leases); expiry 0
marks a lapsed lease whose run was sent again (holder "resent") or must be
(holder "lost").
"""

# Fail-fast, as a function the run's last step calls: a tier whose first results
# are `threshold` times the same infrastructure error, and nothing else yet, is
# stopped. A result of the agent's own, or another infrastructure error (one
# scenario's setup failing, another's agent not starting), keeps it going: its
# runs are then not all broken one way, and a stopped tier's runs would be recorded
# with an error that is not theirs. Returns 'stopped' when this call stopped the
# tier, else 'counted'.
_NOTE_HEALTH = """
local function note_health(health, halted, tier, infra_error, threshold)
  local healthy = tier .. '\\n'
  if infra_error == '' then redis.call('HSET', health, healthy, 1) return 'counted' end
  if redis.call('HEXISTS', health, healthy) == 1 then return 'counted' end
  local first = redis.call('HGET', health, healthy .. '\\n')
  if not first then
    redis.call('HSET', health, healthy .. '\\n', infra_error)
  elseif first ~= infra_error then
    redis.call('HSET', health, healthy, 1)
    return 'counted'
  end
  local seen = redis.call('HINCRBY', health, healthy .. infra_error, 1)
  threshold = tonumber(threshold)
  if threshold > 0 and seen >= threshold and redis.call('HSETNX', halted, tier, infra_error) == 1
  then return 'stopped' end
  return 'counted'
end
"""

# A run's evidence within the experiment's cap, as a function: stored and counted
# when the bytes stored so far leave room for it; else nothing is written (the
# caller then stores the run's minimal evidence, which is kept whatever the cap,
# and only then pays for making it). Returns 'whole' or 'over'.
_KEEP_EVIDENCE = """
local function keep_evidence(evidence, experiment, run_id, value, size, cap)
  local used = tonumber(redis.call('HGET', experiment, 'evidence_bytes') or '0')
  if used + tonumber(size) > tonumber(cap) then return 'over' end
  redis.call('HSET', evidence, run_id, value)
  redis.call('HINCRBY', experiment, 'evidence_bytes', size)
  return 'whole'
end
"""

# A run's last step: storing its result and counting it, its tier's fail-fast
# count and its evidence are one step, in one round trip. A redelivered run that
# finishes late must neither overwrite the first result nor be counted twice, nor
# replace its evidence. A delivery whose lease another delivery has taken over
# stores nothing: only the newest delivery's result counts. One whose lapsed lease
# was only marked (expiry 0) still may. The save ends the lease. An experiment
# without a record (deleted while the run ran) gets nothing: its keys would come
# back without it. The same result saved again is this call's own, tried again
# after Redis went away before its reply: saved, and nothing counted twice.
# KEYS[1] runs, KEYS[2] experiment, KEYS[3] leases, KEYS[4] health, KEYS[5] halted,
# KEYS[6] evidence.
# ARGV[1] run id, ARGV[2] RunResult JSON, ARGV[3] '1' when passed, ARGV[4] the
# counter its status adds to besides `done` ('' for none), ARGV[5] the saving
# delivery's lease holder ('' to save whoever holds it), ARGV[6] the tier whose
# fail-fast count it adds to ('' for none), ARGV[7] its infrastructure error ('' for
# a result of the agent's own), ARGV[8] the fail-fast threshold, ARGV[9] its
# evidence ('' for none: stored apart), ARGV[10] the evidence's bytes, ARGV[11] the
# experiment's evidence cap in bytes.
# Returns 'gone', 'taken over', 'already stored', or {'saved', 'stopped' when it
# stopped its tier else '', 'whole' or 'over' for its evidence else ''}.
SAVE_RUN = (
    _NOTE_HEALTH
    + _KEEP_EVIDENCE
    + """
if redis.call('HEXISTS', KEYS[2], 'info') == 0 then return 'gone' end
if ARGV[5] ~= '' then
  local lease = redis.call('HGET', KEYS[3], ARGV[1])
  if lease then
    local expiry, holder = string.match(lease, '^(%S+) (%S+)$')
    if holder ~= ARGV[5] and tonumber(expiry) > 0 then return 'taken over' end
    redis.call('HDEL', KEYS[3], ARGV[1])
  end
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 'already stored' end
  -- This very result: this call's own save, tried again after Redis went away
  -- before its reply. Everything was done then.
  local kept = ''
  if ARGV[9] ~= '' then
    kept = redis.call('HEXISTS', KEYS[6], ARGV[1]) == 1 and 'whole' or 'over'
  end
  return {'saved', '', kept}
end
redis.call('HINCRBY', KEYS[2], 'done', 1)
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[2], 'passes', 1) end
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[2], ARGV[4], 1) end
local stopped, evidence = '', ''
if ARGV[6] ~= '' and note_health(KEYS[4], KEYS[5], ARGV[6], ARGV[7], ARGV[8]) == 'stopped' then
  stopped = 'stopped'
end
if ARGV[9] ~= '' then
  evidence = keep_evidence(KEYS[6], KEYS[2], ARGV[1], ARGV[9], ARGV[10], ARGV[11])
end
return {'saved', stopped, evidence}
"""
)

# A delivery's first step, in one round trip: nothing when the experiment has no
# record (deleted, or lost by the broker: its run must not re-create its keys);
# the stored result if the run has one (then nothing else happens); nothing when the
# experiment is interrupted (its runs wait for a resume); nothing but how long it
# lasts when another delivery holds the run's live lease (two copies of one message,
# say a broker's restore after a restart, never run at once nor count as two
# deliveries); else the delivery is counted, recorded among the run's
# deliveries (so that one that dies without a result still shows) and takes the
# run's lease, lapsed or its own predecessor's (ARGV[6]: after a provider outage).
# A lease this very holder has is this call's own, tried again after Redis went
# away before its reply: the delivery was counted then, and is not counted twice
# nor taken for another's.
# KEYS[1] runs, KEYS[2] attempts, KEYS[3] leases, KEYS[4] experiment, KEYS[5] halted,
# KEYS[6] deliveries.
# ARGV[1] run id, ARGV[2] holder, ARGV[3] lease seconds, ARGV[4] the run's tier,
# ARGV[5] the worker's name, ARGV[6] the holder this delivery continues ('' none).
# Returns {'gone'}, {'stored', RunResult JSON}, {'paused'}, {'busy', seconds the lease
# has left, its holder}
# or {'started', attempts, experiment status, why fail-fast stopped the tier or '',
# the deliveries' JSON list}.
BEGIN_DELIVERY = """
if redis.call('HEXISTS', KEYS[4], 'info') == 0 then return {'gone'} end
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then return {'stored', stored} end
if redis.call('HGET', KEYS[4], 'status') == 'interrupted' then return {'paused'} end
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local expiry = string.format('%.3f', now + tonumber(ARGV[3])) .. ' ' .. ARGV[2]
local lease = redis.call('HGET', KEYS[3], ARGV[1])
local attempts, delivered
if lease then
  local held_until, holder = string.match(lease, '^(%S+) (%S+)$')
  if holder == ARGV[2] then
    attempts = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '1')
    delivered = redis.call('HGET', KEYS[6], ARGV[1]) or '[]'
  elseif tonumber(held_until) > now and holder ~= ARGV[6] then
    return {'busy', string.format('%.3f', tonumber(held_until) - now), holder}
  end
end
if not attempts then
  attempts = redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
  delivered = redis.call('HGET', KEYS[6], ARGV[1])
  local entry = cjson.encode({worker = ARGV[5], started_at = now})
  if delivered then delivered = string.sub(delivered, 1, -2) .. ',' .. entry .. ']'
  else delivered = '[' .. entry .. ']' end
  redis.call('HSET', KEYS[6], ARGV[1], delivered)
end
redis.call('HSET', KEYS[3], ARGV[1], expiry)
return {'started', attempts, redis.call('HGET', KEYS[4], 'status') or '',
        redis.call('HGET', KEYS[5], ARGV[4]) or '', delivered}
"""

# A delivery that ends without storing a result (a provider outage, sent again
# later) says how it ended: its entry among the run's deliveries gets its end.
# KEYS[1] deliveries. ARGV[1] run id, ARGV[2] the delivery's number (1: the
# first), ARGV[3] its outcome. Returns 'ended', or 'unknown' without that entry.
END_DELIVERY = """
local delivered = redis.call('HGET', KEYS[1], ARGV[1])
if not delivered then return 'unknown' end
local list = cjson.decode(delivered)
local entry = list[tonumber(ARGV[2])]
if not entry then return 'unknown' end
local now = redis.call('TIME')
entry.ended_at = tonumber(now[1]) + tonumber(now[2]) / 1000000
entry.outcome = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(list))
return 'ended'
"""

# A run's evidence on its own (one kept in an artifacts folder, written once its
# result is stored; a run's minimal evidence, once its whole was over the cap).
# KEYS[1] evidence, KEYS[2] experiment. ARGV[1] run id, ARGV[2] the evidence (a
# blob or a file pointer), ARGV[3] the bytes it takes, ARGV[4] the experiment's
# cap in bytes. Returns 'whole', 'over' or 'gone'.
SAVE_EVIDENCE = (
    _KEEP_EVIDENCE
    + """
if redis.call('HEXISTS', KEYS[2], 'info') == 0 then return 'gone' end
return keep_evidence(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4])
"""
)

# One field of one of an experiment's hashes, written only while the experiment
# has its record: a run finishing after a delete must not bring its keys back.
# KEYS[1] the hash, KEYS[2] experiment. ARGV[1] field, ARGV[2] value.
# Returns 'set' or 'gone'.
SET_IF_RECORDED = """
if redis.call('HEXISTS', KEYS[2], 'info') == 0 then return 'gone' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 'set'
"""

# KEYS[1] leases. ARGV[1] run id, ARGV[2] holder, ARGV[3] seconds.
# The run is the holder's for ARGV[3] seconds, whoever held it before.
TAKE_LEASE = """
local now = redis.call('TIME')
local expiry = tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.3f', expiry) .. ' ' .. ARGV[2])
return 'taken'
"""

# KEYS[1] leases. ARGV[1] run id, ARGV[2] holder, ARGV[3] seconds.
# Extends the lease only while it is still the holder's.
RENEW_LEASE = """
local lease = redis.call('HGET', KEYS[1], ARGV[1])
if not lease or string.match(lease, ' (%S+)$') ~= ARGV[2] then return 'not held' end
local now = redis.call('TIME')
local expiry = tonumber(now[1]) + tonumber(now[2]) / 1000000 + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.3f', expiry) .. ' ' .. ARGV[2])
return 'renewed'
"""

# KEYS[1] a key holding its holder's token. ARGV[1] the token.
# Deletes the key only while it is still that holder's. Returns 1 or 0.
RELEASE_HOLD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS[1] leases. ARGV[1] run id, ARGV[2] holder.
# Ends the lease without a result, only while it is still the holder's.
RELEASE_LEASE = """
local lease = redis.call('HGET', KEYS[1], ARGV[1])
if not lease or string.match(lease, ' (%S+)$') ~= ARGV[2] then return 'not held' end
redis.call('HDEL', KEYS[1], ARGV[1])
return 'released'
"""

# Expired leases of runs without a result are returned, once (concurrent sweepers
# each get a different, possibly empty, share) and marked as sent again: the run
# is in the queue again, which the lease of its next delivery replaces. Expired
# leases of finished runs leave the table.
# KEYS[1] leases, KEYS[2] runs. ARGV[1] the holder that marks a run sent again.
# Returns the run ids claimed.
CLAIM_EXPIRED_LEASES = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local lost = {}
local leases = redis.call('HGETALL', KEYS[1])
for i = 1, #leases, 2 do
  local run, expiry, holder = leases[i], string.match(leases[i + 1], '^(%S+) (%S+)$')
  if tonumber(expiry) < now and holder ~= ARGV[1] then
    if redis.call('HEXISTS', KEYS[2], run) == 1 then
      redis.call('HDEL', KEYS[1], run)
    else
      redis.call('HSET', KEYS[1], run, '0 ' .. ARGV[1])
      lost[#lost + 1] = run
    end
  end
end
return lost
"""

# Resume: each run recorded as never started (cancelled, or not run for the
# budget), or with --retry-errors as an infrastructure error, loses its result, its
# delivery count and record, and the counters go back down. Its evidence stays
# until its next result's replaces it.
# KEYS[1] runs, KEYS[2] attempts, KEYS[3] experiment, KEYS[4] deliveries. ARGV[1]
# the counter the runs were counted in ('cancelled', 'not_run', 'errors'), ARGV[2..]
# their run ids. Returns how many results were removed.
UNRECORD = """
local n = 0
for i = 2, #ARGV do
  if redis.call('HDEL', KEYS[1], ARGV[i]) == 1 then n = n + 1 end
  redis.call('HDEL', KEYS[2], ARGV[i])
  redis.call('HDEL', KEYS[4], ARGV[i])
end
redis.call('HINCRBY', KEYS[3], 'done', -n)
redis.call('HINCRBY', KEYS[3], ARGV[1], -n)
redis.call('HDEL', KEYS[3], 'finished_at', 'sent')
return n
"""

# The budget ledger (core.store.ledger): a run about to start reserves its projected
# cost, agent and judge apart. The projection of a kind: the mean of the finished
# runs of the same tier x scenario, else the prior, else the most a finished run
# cost, else the fallback (the run's own cost limit), else 0. It fits when spent +
# reserved + projection stays within the kind's limit (a kind without one always
# fits). The first reservation that does not fit stops the ledger: no later one
# fits until a resume raises the limit. A run that holds a reservation keeps it
# (a redelivery reserves nothing twice).
# KEYS[1] budget, KEYS[2] reservations. ARGV[1] run id, ARGV[2] tier x scenario
# cell, ARGV[3] agent prior, ARGV[4] judge prior, ARGV[5] agent fallback ('' none).
# Returns {'reserved', "AGENT JUDGE"} or {'refused', why}.
RESERVE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if held then return {'reserved', held} end
local stopped = redis.call('HGET', KEYS[1], 'stopped')
if stopped then return {'refused', stopped} end
local function num(field) return tonumber(redis.call('HGET', KEYS[1], field) or '0') end
local function projection(kind, prior, fallback)
  local n = num(kind .. ':n:' .. ARGV[2])
  if n > 0 then return num(kind .. ':sum:' .. ARGV[2]) / n end
  if prior ~= '' then return tonumber(prior) end
  local most = redis.call('HGET', KEYS[1], kind .. ':max')
  if most then return tonumber(most) end
  if fallback ~= '' then return tonumber(fallback) end
  return 0
end
local wanted = {agent = projection('agent', ARGV[3], ARGV[5]),
                judge = projection('judge', ARGV[4], '')}
for _, kind in ipairs({'agent', 'judge'}) do
  local limit = redis.call('HGET', KEYS[1], kind .. ':limit')
  if limit then
    local spent, reserved = num(kind .. ':spent'), num(kind .. ':reserved')
    if spent + reserved + wanted[kind] > tonumber(limit) + 1e-9 then
      local why = string.format(
        '%s budget: $%.4f spent + $%.4f reserved by runs in flight + $%.4f projected for '
        .. 'this run > $%.4f', kind, spent, reserved, wanted[kind], tonumber(limit))
      redis.call('HSET', KEYS[1], 'stopped', why)
      return {'refused', why}
    end
  end
end
local amounts = string.format('%.17g %.17g', wanted.agent, wanted.judge)
redis.call('HINCRBYFLOAT', KEYS[1], 'agent:reserved', wanted.agent)
redis.call('HINCRBYFLOAT', KEYS[1], 'judge:reserved', wanted.judge)
redis.call('HSET', KEYS[2], ARGV[1], amounts)
return {'reserved', amounts}
"""

# A finished run gives back its reservation and adds what it really spent (an
# unknown agent cost counts as its projection). A run whose agent ran teaches the
# projection of its tier x scenario. Once per run: a run without a reservation
# changes nothing.
# KEYS[1] budget, KEYS[2] reservations. ARGV[1] run id, ARGV[2] cell, ARGV[3] agent
# dollars ('' unknown), ARGV[4] judge dollars, ARGV[5] '1' when the agent ran.
# Returns 'settled' or 'not reserved'.
SETTLE = """
local held = redis.call('HGET', KEYS[2], ARGV[1])
if not held then return 'not reserved' end
redis.call('HDEL', KEYS[2], ARGV[1])
local agent, judge = string.match(held, '^(%S+) (%S+)$')
local spent = {agent = ARGV[3] ~= '' and tonumber(ARGV[3]) or tonumber(agent),
               judge = tonumber(ARGV[4])}
redis.call('HINCRBYFLOAT', KEYS[1], 'agent:reserved', -tonumber(agent))
redis.call('HINCRBYFLOAT', KEYS[1], 'judge:reserved', -tonumber(judge))
for _, kind in ipairs({'agent', 'judge'}) do
  redis.call('HINCRBYFLOAT', KEYS[1], kind .. ':spent', spent[kind])
  if ARGV[5] == '1' and (kind == 'judge' or ARGV[3] ~= '') then
    redis.call('HINCRBY', KEYS[1], kind .. ':n:' .. ARGV[2], 1)
    redis.call('HINCRBYFLOAT', KEYS[1], kind .. ':sum:' .. ARGV[2], spent[kind])
    local most = redis.call('HGET', KEYS[1], kind .. ':max')
    if not most or spent[kind] > tonumber(most) then
      redis.call('HSET', KEYS[1], kind .. ':max', string.format('%.17g', spent[kind]))
    end
  end
end
return 'settled'
"""

# An adaptive experiment's next wave is claimed by one sweeper only, and only when
# every run sent so far has a result: the wave number moves on, the new runs are
# recorded (so a sender that dies leaves them to recovery), closed cells are noted
# and the experiment's total drops by the runs they will never have.
# KEYS[1] waves, KEYS[2] runs, KEYS[3] specs, KEYS[4] experiment. ARGV[1] the wave
# the caller saw, ARGV[2] how many runs fewer the total gets, ARGV[3] the number of
# closed cells, then that many (cell, why) pairs, then (run id, RunSpec JSON) pairs.
# Returns 'claimed', 'in flight' (runs without a result) or 'taken'.
CLAIM_WAVE = """
if tonumber(redis.call('HGET', KEYS[1], 'wave') or '1') ~= tonumber(ARGV[1]) then
  return 'taken'
end
if redis.call('HLEN', KEYS[2]) < redis.call('HLEN', KEYS[3]) then return 'in flight' end
redis.call('HSET', KEYS[1], 'wave', tonumber(ARGV[1]) + 1)
redis.call('HINCRBY', KEYS[4], 'total', 0 - tonumber(ARGV[2]))  -- never "-0"
local closed = tonumber(ARGV[3])
for i = 4, 3 + 2 * closed, 2 do redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
for i = 4 + 2 * closed, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
return 'claimed'
"""

# Runs a sweep found nowhere (no result, lease, or message): those it no longer
# reports leave the table; those it has reported for ARGV[1] seconds or longer
# are returned once (whichever sweeper comes first) and leave it.
# KEYS[1] unaccounted. ARGV[1] seconds, ARGV[2..] the run ids found nowhere now.
# Returns the run ids overdue.
TRACK_UNACCOUNTED = """
local now = redis.call('TIME')
now = tonumber(now[1]) + tonumber(now[2]) / 1000000
local current = {}
for i = 2, #ARGV do current[ARGV[i]] = true end
local seen = redis.call('HGETALL', KEYS[1])
for i = 1, #seen, 2 do
  if not current[seen[i]] then redis.call('HDEL', KEYS[1], seen[i]) end
end
local overdue = {}
for i = 2, #ARGV do
  local since = redis.call('HGET', KEYS[1], ARGV[i])
  if not since then
    redis.call('HSET', KEYS[1], ARGV[i], string.format('%.3f', now))
  elseif now - tonumber(since) >= tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
    overdue[#overdue + 1] = ARGV[i]
  end
end
return overdue
"""

# Cancelling (or interrupting) is one step with reading the status: a finish that lands
# between the two must not be relabelled (a complete experiment's report stands).
# Returns the status before ('' for an experiment without a record); only pending,
# running and interrupted ones change.
# KEYS[1] experiment, KEYS[2] its status channel.
# ARGV[1] the new status's value (cancelled or interrupted).
CANCEL = """
local before = redis.call('HGET', KEYS[1], 'status')
if not before then return '' end
if before == 'pending' or before == 'running' or before == 'interrupted' then
  redis.call('HSET', KEYS[1], 'status', ARGV[1])
  redis.call('PUBLISH', KEYS[2], ARGV[1])
end
return before
"""

# Writes of an experiment's status, report and record taken apart, each only while the
# experiment has its record: a finish that lands while it is deleted (its record goes
# first: core.store.retention) writes nothing back. Each returns 'gone' without one.
# KEYS[1] experiment, KEYS[2] its status channel. ARGV[1] the status's value,
# ARGV[2] when it finished ('' to leave it).
SET_STATUS = """
if redis.call('HEXISTS', KEYS[1], 'info') == 0 then return 'gone' end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'finished_at', ARGV[2]) end
redis.call('PUBLISH', KEYS[2], ARGV[1])
return 'set'
"""

# KEYS[1] experiment, KEYS[2] version 1's report (written again by a resume), KEYS[3]
# the later versions' hash (each written once). ARGV[1] the version, ARGV[2] its report.
SAVE_REPORT = """
if redis.call('HEXISTS', KEYS[1], 'info') == 0 then return 'gone' end
if ARGV[1] == '1' then
  redis.call('SET', KEYS[2], ARGV[2])
else
  redis.call('HSETNX', KEYS[3], ARGV[1], ARGV[2])
end
return 'saved'
"""

# The record taken out with its place in the experiments list, in one step with
# reading the chords it names (their Celery keys go next).
# KEYS[1] experiment, KEYS[2] the experiments list. ARGV[1] the experiment's id.
# Returns {1 or 0 (whether it had a record), its chord ids ('' for none)}.
TAKE_OUT = """
local chords = redis.call('HGET', KEYS[1], 'chords') or ''
local had = redis.call('EXISTS', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[1])
return {had, chords}
"""
