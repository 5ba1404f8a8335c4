package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
)

// follow watches every bucket and the events stream until ctx ends,
// rewatching after an error.
func (s *state) follow(ctx context.Context, js jetstream.JetStream, every time.Duration, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, w := range s.watchedBuckets() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			retry(ctx, func() error { return s.watchBucket(ctx, js, w) }, func(err error) {
				s.setWatchError(w.bucket, err)
				logf("dashboard: watch %s: %v (retrying)", w.bucket, err)
			})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watchStore(ctx, js, every, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.readTargets(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.readDesired(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.followApplied(ctx, js, logf)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last uint64
		retry(ctx, func() error { return s.followEvents(ctx, js, &last) }, func(err error) {
			s.setWatchError(contract.StreamEvents, err)
			logf("dashboard: follow %s: %v (retrying)", contract.StreamEvents, err)
		})
	}()
	wg.Wait()
}

func (s *state) setWatchError(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.watchErrors, name)
	} else {
		s.watchErrors[name] = err.Error()
	}
}

// retry runs f until ctx ends, waiting a growing pause (up to 5 s) after
// each error.
func retry(ctx context.Context, f func() error, onErr func(error)) {
	wait := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := f()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("watch ended")
		}
		onErr(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

func (s *state) watchBucket(ctx context.Context, js jetstream.JetStream, w watched) error {
	kv, err := js.KeyValue(ctx, w.bucket)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", w.bucket, err)
	}
	var watcher jetstream.KeyWatcher
	if w.key != "" {
		watcher, err = kv.Watch(ctx, w.key)
	} else {
		watcher, err = kv.WatchAll(ctx, w.opts...)
	}
	if err != nil {
		return fmt.Errorf("watch bucket %s: %w", w.bucket, err)
	}
	defer watcher.Stop()
	if w.bucket == contract.BucketLeases {
		if st, err := kv.Status(ctx); err == nil {
			s.mu.Lock()
			s.leaseTTL = st.TTL()
			s.mu.Unlock()
		}
	}
	s.setWatchError(w.bucket, nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-watcher.Updates():
			if !ok {
				return nil
			}
			s.mu.Lock()
			if e == nil {
				s.ready[w.bucket] = true
			} else if !contract.IsControlKey(e.Key()) {
				s.applyEntry(w, e)
			}
			s.mu.Unlock()
		}
	}
}

// applyEntry applies one watched entry; the caller holds mu.
func (s *state) applyEntry(w watched, e jetstream.KeyValueEntry) {
	if w.bucket == contract.BucketNodeConfigs {
		if node, _, ok := contract.NodeOfConfigKey(e.Key()); ok && e.Key() == contract.DesiredKey(node) {
			s.desiredWritten(node, e.Operation() != jetstream.KeyValuePut, keyWrite{at: e.Created(), rev: e.Revision()})
		}
		return
	}
	var data []byte
	if e.Operation() == jetstream.KeyValuePut {
		data = e.Value()
	}
	if w.bucket == contract.BucketLeases && e.Key() == contract.LeaseCoordinator {
		s.leaseEnd = nil
		if e.Operation() != jetstream.KeyValuePut {
			// The server's expiry marker reads as a purge, a release as a delete.
			s.leaseEnd = &leaseEnd{at: e.Created(), expired: e.Operation() == jetstream.KeyValuePurge}
		}
	}
	id := w.bucket + "/" + e.Key()
	kind, changed, err := w.apply(e.Key(), data)
	switch {
	case err != nil:
		s.unreadable[id] = view.NewUnreadable(w.bucket, e.Key(), err)
	default:
		delete(s.unreadable, id)
	}
	if changed && kind != "" {
		s.note(kind, e.Key(), nil)
	}
	switch {
	case kind == kindRollout || kind == kindActive:
		s.replaceAll()
	case kind == kindNode && changed:
		if w.bucket == contract.BucketNodes {
			delete(s.place.targets, e.Key()) // its labels may have changed
		}
		s.placeNode(e.Key(), false) // noted above
	}
}

// followEvents reads the events stream from after *last (or its last
// recentEvents on the first start), keeping the recent ones and noting
// each as a change.
func (s *state) followEvents(ctx context.Context, js jetstream.JetStream, last *uint64) error {
	stream, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if *last > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, *last+1
	} else {
		info, err := stream.Info(ctx)
		if err != nil {
			return fmt.Errorf("stream %s: %w", contract.StreamEvents, err)
		}
		if info.State.LastSeq > recentEvents {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, info.State.LastSeq-recentEvents+1
		}
	}
	it, _, err := view.EventMessages(ctx, stream, cfg)
	if err != nil {
		return err
	}
	defer it.Stop()
	s.setWatchError(contract.StreamEvents, nil)
	for {
		msg, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return err
		}
		*last = meta.Sequence.Stream
		b := eventJSON(msg.Subject(), msg.Data(), meta)
		s.mu.Lock()
		s.events = append(s.events, b)
		if len(s.events) > recentEvents {
			s.events = slices.Delete(s.events, 0, len(s.events)-recentEvents)
		}
		s.note(kindEvent, "", b)
		s.mu.Unlock()
	}
}

// streamEvent is an event as the stream sends it: the stream's sequence,
// and the stored event (or why it is unreadable: eventJSON).
type streamEvent struct {
	Seq        uint64          `json:"seq"`
	Event      json.RawMessage `json:"event,omitempty"`
	Unreadable string          `json:"unreadable,omitempty"`
}

// eventJSON is one message of the events stream as the page shows it: the
// event, or why it is unreadable (it does not decode, or it is not an
// event its subject's publishers may send: events.Read).
func eventJSON(subject string, data []byte, meta *jetstream.MsgMetadata) json.RawMessage {
	e := streamEvent{Seq: meta.Sequence.Stream}
	ev, err := events.Read(subject, data)
	if err != nil {
		e.Unreadable = err.Error()
	} else if e.Event, err = view.JSON(ev); err != nil {
		e.Unreadable = err.Error()
	}
	b, _ := json.Marshal(e) // a struct of raw JSON and strings
	return b
}
