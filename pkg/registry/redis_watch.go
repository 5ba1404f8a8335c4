package registry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/pkg/backoff"
)

// watch follows the keyspace notifications of the prefix's keys until ctx
// is done, subscribing again with a growing wait after each failure.
func (r *redisRegistry) watch(ctx context.Context) {
	retry := backoff.New(redisRetry)
	for reconnect := false; ; reconnect = true {
		subscribed, err := r.follow(ctx, reconnect)
		if ctx.Err() != nil {
			return
		}
		if subscribed {
			retry.Reset()
		}
		r.setNote(fmt.Sprintf("change notifications are not received (%v): changes are seen at the next sync interval", err))
		if !sleep(ctx, retry.Next()) {
			return
		}
	}
}

// follow subscribes to the keyspace notifications and nudges for each
// until the connection fails or ctx is done. subscribed reports whether
// the subscription was made. After a reconnect it nudges at once: what
// changed while it was away was announced to no one.
func (r *redisRegistry) follow(ctx context.Context, reconnect bool) (subscribed bool, err error) {
	c := r.newClient()
	defer c.Close()
	ps := c.PSubscribe(ctx) // no pattern yet: no I/O
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the connection ends it.
	defer context.AfterFunc(ctx, func() { _ = ps.Close() })()

	if err := ps.PSubscribe(ctx, r.pattern); err != nil {
		return false, fmt.Errorf("psubscribe %s: %w", r.pattern, err)
	}
	if _, err := ps.ReceiveTimeout(ctx, redisTimeout); err != nil { // the confirmation
		return false, fmt.Errorf("psubscribe %s: %w", r.pattern, err)
	}
	r.recheck(ctx, c)
	checked := time.Now()
	if reconnect {
		r.nudge()
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, redisIdlePing)
		switch {
		case err == nil:
			pinged = false
			if _, ok := msg.(*redis.Message); ok {
				// A notification while the note says they are missing:
				// the setting changed. Read it before the sync the nudge
				// asks for, so that the status that sync writes has it.
				if r.Note() != "" && time.Since(checked) >= redisNoteRecheck {
					r.recheck(ctx, c)
					checked = time.Now()
				}
				r.nudge()
			}
		case isTimeout(err) && !pinged:
			// Silence: check the connection, and whether the server's
			// setting changed meanwhile.
			if err := ps.Ping(ctx); err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
			pinged = true
			r.recheck(ctx, c)
			checked = time.Now()
		case isTimeout(err):
			return true, fmt.Errorf("no answer to ping within %s", redisIdlePing)
		default:
			return true, fmt.Errorf("receive: %w", err)
		}
	}
}

// recheck reads the server's notify-keyspace-events again and sets the
// note, nudging when the note changed: the sync that follows writes it
// into the registry's status at once, not at the next sync interval, and
// when notifications have just come back it catches up what changed while
// they were missing, which was announced to no one.
func (r *redisRegistry) recheck(ctx context.Context, c *redis.Client) {
	was := r.Note()
	note := r.keyspaceNote(ctx, c)
	r.setNote(note)
	if note != was {
		r.nudge()
	}
}

// keyspaceNote reads the server's notify-keyspace-events and says what an
// operator should know about it ("" when the notifications Changed needs
// are on).
func (r *redisRegistry) keyspaceNote(ctx context.Context, c *redis.Client) string {
	ctx, cancel := context.WithTimeout(ctx, redisTimeout)
	defer cancel()
	vals, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		return fmt.Sprintf("cannot tell whether keyspace notifications are on (CONFIG GET notify-keyspace-events: %v): "+
			"if they are off, changes are seen at the next sync interval", err)
	}
	flags, ok := vals["notify-keyspace-events"]
	if !ok {
		return "cannot tell whether keyspace notifications are on (CONFIG GET notify-keyspace-events answered nothing): " +
			"if they are off, changes are seen at the next sync interval"
	}
	return notifyFlagsNote(flags)
}

// notifyFlagsNote says what notify-keyspace-events flags miss for Changed:
// keyspace notifications (K) of string writes ($) and of generic commands
// such as DEL and RENAME (g). A (all classes) covers both classes.
func notifyFlagsNote(flags string) string {
	if !strings.Contains(flags, "K") {
		return fmt.Sprintf("keyspace notifications are off on the server (notify-keyspace-events=%q): "+
			"changes are seen at the next sync interval; set notify-keyspace-events to KA to see them at once", flags)
	}
	if strings.Contains(flags, "A") {
		return ""
	}
	var missing []string
	if !strings.Contains(flags, "$") {
		missing = append(missing, "$ (SET)")
	}
	if !strings.Contains(flags, "g") {
		missing = append(missing, "g (DEL, RENAME)")
	}
	if len(missing) == 0 {
		return ""
	}
	return fmt.Sprintf("keyspace notifications on the server leave out %s (notify-keyspace-events=%q): "+
		"those changes are seen at the next sync interval; add the missing classes, or set KA, to see them at once",
		strings.Join(missing, " and "), flags)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
