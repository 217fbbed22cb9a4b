package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sqlinbox/sqlinbox/notify"
)

// Redis keeps locks in Redis: one hash per lock (a field per holder place
// and the fencing counter), taken by one Lua script per call, so taking a
// free place is one round trip. Expiries run on the server's clock (TIME).
// A release publishes on a channel every Redis store of the prefix
// subscribes to, so waiters on every instance wake at once.
//
// A lock's hash expires (PEXPIRE) with its longest hold, and a release that
// leaves no place held deletes it, so Redis keeps the live holds and nothing
// of a name whose holds have ended. The fencing number therefore cannot be a
// counter of the name alone: it is the greater of the hash's last fence plus
// one and the server's TIME in microseconds, so a name taken anew after its
// hash went still gets a greater number, as long as the server's clock does
// not step back by more than the hold's TTL.
type Redis struct {
	client  redis.UniversalClient
	prefix  string
	channel string
	hub     *notify.Hub
	log     *slog.Logger
	ps      *redis.PubSub
	stop    func()
	done    chan struct{}
}

// NewRedis returns a store over the user's client. It subscribes to the
// release channel (on a connection of its own, as go-redis does for pub/sub)
// and fails when Redis cannot be reached. Close ends the subscription. A nil
// client or an option's value out of its bound fails with an error wrapping
// ErrInvalid, before Redis is asked.
func NewRedis(ctx context.Context, client redis.UniversalClient, opts ...RedisOption) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("lock.NewRedis: %w: client is nil; give the go-redis client the store keeps its locks with", ErrInvalid)
	}
	o := redisConfig{prefix: DefaultRedisPrefix, logger: slog.Default()}
	if err := apply(&o, opts); err != nil {
		return nil, fmt.Errorf("lock.NewRedis: %w", err)
	}
	r := &Redis{client: client, prefix: o.prefix, channel: o.prefix + "lock:released", hub: notify.NewHub(), log: o.logger}
	ps := client.Subscribe(ctx, r.channel)
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		ps.Close()
		return nil, fmt.Errorf("lock: redis: subscribe to %s: %w", r.channel, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.ps, r.stop, r.done = ps, cancel, make(chan struct{})
	go r.listen(runCtx, ps)
	return r, nil
}

// listen carries release messages into the hub. go-redis resubscribes after
// a lost connection; what was published in the gap is gone, so every waiter
// tries once when the subscription is back.
func (r *Redis) listen(ctx context.Context, ps *redis.PubSub) {
	defer close(r.done)
	lost := false
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !lost {
				r.log.Warn("lock: redis release subscription lost; waiters fall back to expiries and retry delays until it is back", "err", err)
				lost = true
			}
			// go-redis reconnects on the next Receive, with its own backoff.
			t := time.NewTimer(50 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Message:
			r.hub.Wake(r.channel, m.Payload)
		case *redis.Subscription:
			if lost {
				r.log.Info("lock: redis release subscription back")
				lost = false
			}
			r.hub.Wake(r.channel, "")
		}
	}
}

// Close ends the release subscription. The client stays open: it is the
// user's.
func (r *Redis) Close() error {
	if r.stop != nil {
		r.stop()
		r.ps.Close() // unblocks Receive, which does not watch its context
		<-r.done
		r.stop = nil
	}
	return nil
}

func (r *Redis) key(k Key) string {
	return r.prefix + "lock:" + strconv.Itoa(len(k.Namespace)) + ":" + k.Namespace + ":" + k.Name
}

// A place's field holds "expiresMs:fence:secret"; "fence" the counter.
const redisNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function keep(ttl)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
end
`

var redisAcquire = redis.NewScript(redisNow + `
local max, ttl, secret = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local nearest = -1
for s = 0, max - 1 do
  local f = 's' .. s
  local v = redis.call('HGET', KEYS[1], f)
  local exp = 0
  if v then exp = tonumber(string.match(v, '^(%d+):')) end
  if exp <= now then
    local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
    local fence = math.max(last + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
    redis.call('HSET', KEYS[1], 'fence', string.format('%d', fence), f, string.format('%d:%d:%s', now + ttl, fence, secret))
    keep(ttl)
    return {1, s, fence}
  end
  if nearest < 0 or exp - now < nearest then nearest = exp - now end
end
return {0, nearest, 0}`)

var redisExtend = redis.NewScript(redisNow + `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return -1 end
local exp, fence, secret = string.match(v, '^(%d+):(%d+):(.*)$')
if secret ~= ARGV[2] or tonumber(exp) <= now then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%s:%s', now + tonumber(ARGV[3]), fence, secret))
keep(tonumber(ARGV[3]))
return tonumber(fence)`)

var redisRelease = redis.NewScript(redisNow + `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local exp, fence, secret = string.match(v, '^(%d+):(%d+):(.*)$')
if secret ~= ARGV[2] or tonumber(exp) <= now then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1`)

// Acquire implements Store.
func (r *Redis) Acquire(ctx context.Context, k Key, secret string, ttl time.Duration, maxHolders int) (Grant, error) {
	ms := max(ttl.Milliseconds(), 1)
	res, err := redisAcquire.Run(ctx, r.client, []string{r.key(k)}, maxHolders, ms, secret).Int64Slice()
	if err != nil {
		return Grant{}, err
	}
	if len(res) != 3 {
		return Grant{}, fmt.Errorf("lock: redis: acquire script answered %v", res)
	}
	if res[0] == 1 {
		return Grant{Acquired: true, Slot: int(res[1]), Fence: res[2], TTL: time.Duration(ms) * time.Millisecond}, nil
	}
	if res[1] < 0 {
		return Grant{Expiry: -1}, nil
	}
	return Grant{Expiry: time.Duration(res[1]) * time.Millisecond}, nil
}

// Extend implements Store.
func (r *Redis) Extend(ctx context.Context, k Key, slot int, secret string, ttl time.Duration) (Grant, error) {
	ms := max(ttl.Milliseconds(), 1)
	fence, err := redisExtend.Run(ctx, r.client, []string{r.key(k)}, "s"+strconv.Itoa(slot), secret, ms).Int64()
	if err != nil {
		return Grant{}, err
	}
	if fence < 0 {
		return Grant{}, nil
	}
	return Grant{Acquired: true, Slot: slot, Fence: fence, TTL: time.Duration(ms) * time.Millisecond}, nil
}

// Release implements Store.
func (r *Redis) Release(ctx context.Context, k Key, slot int, secret string) (bool, error) {
	n, err := redisRelease.Run(ctx, r.client, []string{r.key(k)}, "s"+strconv.Itoa(slot), secret, r.channel, k.WakeKey()).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if n == 1 {
		r.hub.Wake(r.channel, k.WakeKey())
	}
	return n == 1, nil
}

// Subscribe implements Store.
func (r *Redis) Subscribe(ctx context.Context, k Key) (Wakes, error) {
	return r.hub.Subscribe(r.channel, k.WakeKey()), nil
}
