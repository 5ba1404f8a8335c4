package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/pkg/buckets"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/embedded"
	"github.com/sluicehq/sluice/pkg/render"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// The floor: the messages a rollout stores and delivers per node, sent over
// the same embedded server, buckets and connections as Run, with none of
// sluice's services and none of their work — no decisions, no encoding (the
// values are encoded once, before the clock starts), no checks, no retries.
// Per node: the coordinator's compare-and-set write of the desired config
// (acknowledged), its republication to the node's subject, the agent's
// compare-and-set write of its status (acknowledged), that status delivered
// to the coordinator's watch, and the agent's NodeProvisioned event
// (acknowledged). Its wall time is what a rollout could take on this
// machine and transport if sluice's own work cost nothing: a floor under
// Run's overhead_ratio at the same size (docs/benchmarks.md).

// FloorResult is one floor run; its JSON is the BENCH line of --floor.
type FloorResult struct {
	Scenario      string   `json:"scenario"` // "floor"
	Nodes         int      `json:"nodes"`
	MaxParallel   int      `json:"max_parallel"`
	ApplyMS       int64    `json:"apply_ms"`
	WallMS        float64  `json:"wall_ms"`
	IdealMS       int64    `json:"ideal_ms"`
	OverheadRatio float64  `json:"overhead_ratio,omitempty"` // absent when ideal_ms is 0
	CPUUSPerNode  float64  `json:"cpu_us_per_node"`
	CoresBusy     float64  `json:"cores_busy"`
	BytesPerNode  int      `json:"bytes_per_node"` // the three values' encoded sizes, summed
	LoadAvgStart  *float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd    *float64 `json:"load_avg_end,omitempty"`
}

// Line is the result as the bench prints it: BENCH {json}.
func (r FloorResult) Line() (string, error) { return benchLine(r) }

// floorValues are the three values a node's rollout stores, encoded as
// sluice encodes them, at the sizes a bench rollout stores them.
type floorValues struct{ desired, status, event []byte }

func newFloorValues() (floorValues, error) {
	now := timestamppb.Now()
	rev := &sluicev1.Revision{Id: render.RevisionID(Intents()), Intents: Intents()}
	cfg := render.NodeConfig(rev, map[string]string{"zone": "zone-a", "rack": "rack-1"})
	fp := render.Fingerprint(cfg)
	rollout := contract.RolloutID(2, rev.GetId())
	desired := &sluicev1.DesiredConfig{Node: "node-00001", Revision: rev.GetId(), Rollout: rollout, Fingerprint: fp, Config: cfg,
		WrittenAt: now, Operation: rollout + "/1", Deadline: durationpb.New(5 * time.Minute)}
	status := &sluicev1.NodeStatus{Node: "node-00001", Phase: sluicev1.NodePhase_NODE_PHASE_PROVISIONED, Revision: rev.GetId(),
		Rollout: rollout, Fingerprint: fp, ApplyStartedAt: now, LastUpdate: now, Message: "applied", AppliedFingerprint: fp,
		Operation: rollout + "/1"}
	event := &sluicev1.Event{Time: now, Component: contract.ComponentAgent, Kind: contract.KindNode, Id: "node-00001",
		Type: "NodeProvisioned", Reason: "applied revision " + render.Short(rev.GetId()) + " (fingerprint " + render.Short(fp) + ") in 100ms",
		Node: "node-00001", Revision: rev.GetId(), Rollout: rollout, Fingerprint: fp}
	var v floorValues
	var errs [3]error
	v.desired, errs[0] = store.Marshal(desired)
	v.status, errs[1] = store.Marshal(status)
	v.event, errs[2] = store.Marshal(event)
	return v, errors.Join(errs[:]...)
}

// Floor runs the floor: o.Nodes agents that each wait o.ApplyLatency for
// their desired config and report it, o.MaxParallel at a time.
func Floor(ctx context.Context, o Options) (res FloorResult, err error) {
	res = FloorResult{Scenario: "floor", Nodes: o.Nodes, MaxParallel: o.MaxParallel, ApplyMS: o.ApplyLatency.Milliseconds(), LoadAvgStart: loadAvg()}
	defer func() { res.LoadAvgEnd = loadAvg() }()
	if o.Nodes <= 0 || o.MaxParallel <= 0 {
		return res, errors.New("floor: nodes and max-parallel must be positive")
	}
	if o.AgentsPerConn <= 0 {
		o.AgentsPerConn = 250
	}
	values, err := newFloorValues()
	if err != nil {
		return res, err
	}
	res.BytesPerNode = len(values.desired) + len(values.status) + len(values.event)
	dir, err := os.MkdirTemp("", "sluice-floor-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		return res, err
	}
	defer srv.Shutdown()
	var conns []*nats.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	connect := func() (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(64<<10))
		return nc, js, err
	}
	_, js, err := connect()
	if err != nil {
		return res, err
	}
	if err := buckets.Ensure(ctx, js, contract.DefaultSettings()); err != nil {
		return res, err
	}

	// The agents: one subscription (one goroutine) each.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var agentErr atomic.Pointer[error]
	fail := func(err error) {
		if ctx.Err() == nil && agentErr.CompareAndSwap(nil, &err) {
			cancel()
		}
	}
	var anc *nats.Conn
	var ajs jetstream.JetStream
	for i := range o.Nodes {
		if i%o.AgentsPerConn == 0 {
			if anc, ajs, err = connect(); err != nil {
				return res, err
			}
		}
		node, conn, js := nodeName(i), anc, ajs
		statusSubject := "$KV." + contract.BucketStatus + "." + node
		if _, err := conn.Subscribe(contract.NodeConfigSubject(node), func(*nats.Msg) {
			if sleep(ctx, o.ApplyLatency) != nil {
				return
			}
			// Acknowledged, compare-and-set on a fresh key, as the agent's
			// status write is.
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: statusSubject, Data: values.status},
				jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
				fail(fmt.Errorf("%s: status: %w", node, err))
				return
			}
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: contract.EventSubject(contract.KindNode, node), Data: values.event}); err != nil {
				fail(fmt.Errorf("%s: event: %w", node, err))
			}
		}); err != nil {
			return res, err
		}
	}
	for _, c := range conns {
		if err := c.Flush(); err != nil {
			return res, err
		}
	}

	// The coordinator: its own connection, a watch of the statuses, a
	// desired config written as each slot frees.
	_, cjs, err := connect()
	if err != nil {
		return res, err
	}
	statuses, err := cjs.KeyValue(ctx, contract.BucketStatus)
	if err != nil {
		return res, err
	}
	w, err := statuses.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return res, err
	}
	defer func() { _ = w.Stop() }()
	next := 0
	write := func() error {
		m := nats.NewMsg("$KV." + contract.BucketNodeConfigs + "." + contract.DesiredKey(nodeName(next)))
		m.Header.Set(nats.ExpectedLastSubjSeqHdr, "0")
		m.Data = values.desired
		next++
		_, err := cjs.PublishMsgAsync(m)
		return err
	}
	if o.Measuring != nil {
		o.Measuring(true)
		defer o.Measuring(false)
	}
	cpu0 := selfCPU()
	start := time.Now()
	for next < min(o.MaxParallel, o.Nodes) {
		if err := write(); err != nil {
			return res, err
		}
	}
	timeout := time.After(30 * time.Minute)
	for done := 0; done < o.Nodes; {
		select {
		case <-ctx.Done():
			if p := agentErr.Load(); p != nil {
				return res, *p
			}
			return res, ctx.Err()
		case <-timeout:
			return res, fmt.Errorf("floor: %d of %d nodes reported after 30m", done, o.Nodes)
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			done++
			if next < o.Nodes {
				if err := write(); err != nil {
					return res, err
				}
			}
		}
	}
	wall := time.Since(start)
	cpu := selfCPU() - cpu0
	select {
	case <-cjs.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		return res, errors.New("floor: desired-config writes still unacknowledged 10s after the last status")
	}
	// Every event landed too (nothing else writes the stream).
	events, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return res, err
	}
	if err := waitFor(ctx, 10*time.Second, func() (bool, error) {
		info, err := events.Info(ctx)
		return err == nil && info.State.Msgs >= uint64(o.Nodes), err
	}); err != nil {
		return res, fmt.Errorf("floor: waiting for the %d events: %w", o.Nodes, err)
	}
	res.WallMS = float64(wall.Microseconds()) / 1000
	res.IdealMS = idealMS(o)
	res.OverheadRatio = overheadRatio(res.WallMS, res.IdealMS)
	res.CPUUSPerNode, res.CoresBusy = cpuFigures(cpu, wall, o.Nodes)
	return res, nil
}
