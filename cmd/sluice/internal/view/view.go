// Package view shapes what sluice stores into the objects its readers show:
// `sluice get … -o json` and the dashboard's JSON API print the same
// objects, built here, so that both say the same thing in the same words.
package view

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Node is one node as its agent's presence lease and its status show it;
// either may be missing (a node that left keeps its status until the reaper
// removes it; a node that just joined has no status yet).
type Node struct {
	Name     string
	Presence *sluicev1.NodePresence
	Status   *sluicev1.NodeStatus
	// InForce is the revision in force (last-applied) when the node runs
	// the config it gives the node, else "": after an undo to a revision
	// that gives a node the config it already ran, its status still names
	// the revision that last changed it (MarkInForce).
	InForce string
}

// Labels are a node's labels: its presence's, or, once it departed (no
// presence), those its last status carried (NodeStatus.node_labels), as the
// dashboard's fleet map groups it; nil when neither says.
func (n Node) Labels() map[string]string {
	if n.Presence != nil {
		return n.Presence.GetLabels()
	}
	return n.Status.GetNodeLabels()
}

// Revision is the revision a node's REVISION shows: the revision in force
// when the node runs its config, else the one its agent last applied a
// config from.
func (n Node) Revision() string {
	if n.InForce != "" {
		return n.InForce
	}
	if n.Status == nil {
		return n.Presence.GetInForceRevision() // what its agent says it runs (no status: a lost store)
	}
	return n.Status.GetRevision()
}

// MarkInForce sets InForce on each present node that runs the config
// inForce (the last-applied revision, nil: none known) gives it.
func MarkInForce(nodes []Node, inForce *sluicev1.Revision) {
	if inForce == nil {
		return
	}
	f := NewInForce(inForce)
	for i := range nodes {
		nodes[i].InForce = f.Of(nodes[i])
	}
}

// InForce tells which nodes run the config the revision in force gives
// them. It renders the revision once per distinct label set, so that a
// reader that keeps it (the dashboard) pays for a node's check once per
// rack, not once per node and update.
type InForce struct {
	rev *sluicev1.Revision
	fps map[string]string // labels (labelKey) → fingerprint of the config rendered for them
}

// NewInForce is rev's InForce.
func NewInForce(rev *sluicev1.Revision) *InForce {
	return &InForce{rev: rev, fps: map[string]string{}}
}

// Revision is the id of the revision in force; "" for a nil InForce.
func (f *InForce) Revision() string {
	if f == nil {
		return ""
	}
	return f.rev.GetId()
}

// Of is the revision's id when n is present and runs the config it gives
// n, else "" (and "" for a nil InForce).
func (f *InForce) Of(n Node) string {
	if f == nil || n.Presence == nil || n.Status.GetAppliedFingerprint() == "" {
		return ""
	}
	labels := n.Presence.GetLabels()
	key := labelKey(labels)
	fp, ok := f.fps[key]
	if !ok {
		fp = render.Fingerprint(render.NodeConfig(f.rev, labels))
		f.fps[key] = fp
	}
	if fp != n.Status.GetAppliedFingerprint() {
		return ""
	}
	return f.rev.GetId()
}

// labelKey is labels in one string, by key.
func labelKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// NodeObject is a node in json and yaml output.
type NodeObject struct {
	Node     string          `json:"node"`
	Present  bool            `json:"present"`
	InForce  string          `json:"revisionInForce,omitempty"`
	Presence json.RawMessage `json:"presence,omitempty"`
	Status   json.RawMessage `json:"status,omitempty"`
}

// Object encodes n as its NodeObject.
func (n Node) Object() (json.RawMessage, error) {
	o := NodeObject{Node: n.Name, Present: n.Presence != nil, InForce: n.InForce}
	var err error
	if n.Presence != nil {
		if o.Presence, err = JSON(n.Presence); err != nil {
			return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
		}
	}
	if n.Status != nil {
		if o.Status, err = JSON(n.Status); err != nil {
			return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
		}
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("encode node %s: %w", n.Name, err)
	}
	return b, nil
}

// NodeObjects encodes every node, in order.
func NodeObjects(nodes []Node) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(nodes))
	for _, n := range nodes {
		b, err := n.Object()
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// MergeNodes joins presences and statuses by node name, sorted.
func MergeNodes(presences []*sluicev1.NodePresence, statuses []*sluicev1.NodeStatus) []Node {
	byName := map[string]*Node{}
	row := func(name string) *Node {
		if r, ok := byName[name]; ok {
			return r
		}
		r := &Node{Name: name}
		byName[name] = r
		return r
	}
	for _, p := range presences {
		row(p.GetNode()).Presence = p
	}
	for _, s := range statuses {
		row(s.GetNode()).Status = s
	}
	out := make([]Node, 0, len(byName))
	for _, r := range byName {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// ProtoObjects encodes each message as its stored JSON (protojson names),
// 64-bit integers as numbers (JSON).
func ProtoObjects[T proto.Message](items []T) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		b, err := JSON(it)
		if err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// SortRollouts orders rollouts newest first: by start, then by generation.
func SortRollouts(rs []*sluicev1.Rollout) {
	slices.SortStableFunc(rs, func(a, b *sluicev1.Rollout) int {
		if c := b.GetStartedAt().AsTime().Compare(a.GetStartedAt().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(b.GetGeneration(), a.GetGeneration())
	})
}

// SortFingerprints orders invalid fingerprints newest first, then by fingerprint.
func SortFingerprints(fs []*sluicev1.InvalidFingerprint) {
	slices.SortStableFunc(fs, func(a, b *sluicev1.InvalidFingerprint) int {
		if c := b.GetTime().AsTime().Compare(a.GetTime().AsTime()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetFingerprint(), b.GetFingerprint())
	})
}

// PauseObjects is `sluice get pause -o json`'s items: the request first
// ({} when never paused), then the instances.
func PauseObjects(req *sluicev1.PauseRequest, insts []*sluicev1.Instance) ([]json.RawMessage, error) {
	first, err := PauseRequestObject(req)
	if err != nil {
		return nil, err
	}
	rest, err := ProtoObjects(insts)
	if err != nil {
		return nil, err
	}
	return append([]json.RawMessage{first}, rest...), nil
}

// PauseRequestObject is the requested pause as JSON, {} when never paused.
func PauseRequestObject(req *sluicev1.PauseRequest) (json.RawMessage, error) {
	if req == nil {
		req = &sluicev1.PauseRequest{}
	}
	b, err := JSON(req)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return b, nil
}

// Unreadable is a stored value that does not decode. Listings show it and
// carry on: one bad value must not hide the rest of the fleet.
type Unreadable struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// NewUnreadable describes the value at bucket/key that failed with err
// (a store.ErrUndecodable).
func NewUnreadable(bucket, key string, err error) Unreadable {
	return Unreadable{Bucket: bucket, Key: key, Reason: strings.TrimPrefix(err.Error(), "decode "+bucket+"/"+key+": ")}
}

// Cell is how a table shows the value in place of its row.
func (u Unreadable) Cell() string {
	return fmt.Sprintf("<unreadable: %s/%s %s>", u.Bucket, u.Key, u.Reason)
}

// List is a listing in json and yaml output: {"items": [...], "unreadable": [...]}.
type List struct {
	// Request is what a listing of instances answers to (get pause: the
	// requested pause), kept apart from the items.
	Request    json.RawMessage   `json:"request,omitempty"`
	Items      []json.RawMessage `json:"items"`
	Unreadable []Unreadable      `json:"unreadable"`
}

// NewList makes a List whose empty parts encode as [] rather than null.
func NewList(items []json.RawMessage, unreadable []Unreadable) List {
	if items == nil {
		items = []json.RawMessage{}
	}
	if unreadable == nil {
		unreadable = []Unreadable{}
	}
	return List{Items: items, Unreadable: unreadable}
}

// AgentInstance is a node's agent as `sluice get pause` lists it among the
// instances: its presence is its instance record.
func AgentInstance(p *sluicev1.NodePresence) *sluicev1.Instance {
	return &sluicev1.Instance{Component: contract.ComponentAgent, Instance: p.GetNode(), Version: p.GetAgentVersion(),
		StartedAt: p.GetStartedAt(), HeartbeatAt: p.GetHeartbeatAt(), Pause: p.GetPause()}
}

// EventMessages follows the events stream with an ordered consumer of cfg
// until ctx ends (the iterator then stops); info is the consumer's, as
// created, which says how many events were stored already.
func EventMessages(ctx context.Context, stream jetstream.Stream, cfg jetstream.OrderedConsumerConfig) (jetstream.MessagesContext, *jetstream.ConsumerInfo, error) {
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, nil, fmt.Errorf("read stream %s: %w", contract.StreamEvents, err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	return it, cons.CachedInfo(), nil
}
