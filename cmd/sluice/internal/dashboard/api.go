package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/cmd/sluice/internal/view"
	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// configAnswer is GET /api/v1/config: what the page needs to lay itself out.
type configAnswer struct {
	GroupBy  []string `json:"groupBy"`
	Controls bool     `json:"controls"`           // controls are enabled
	Readonly string   `json:"readonly,omitempty"` // why they are not
	Ready    bool     `json:"ready"`              // every bucket's values are read
	Watch    []string `json:"watchErrors,omitempty"`
	// Categories are the words and meaning of each category the map and
	// the counts use (contract.Categories), in the order they are shown.
	Categories []contract.Category `json:"categories"`
}

func (srv *Server) handleConfig(w http.ResponseWriter, _ *http.Request) {
	a := configAnswer{GroupBy: srv.opts.GroupBy, Controls: srv.opts.Run != nil && srv.opts.Readonly == "", Readonly: srv.opts.Readonly,
		Categories: contract.Categories}
	if srv.opts.Run == nil && a.Readonly == "" {
		a.Readonly = "this dashboard runs without controls"
	}
	srv.state.mu.Lock()
	a.Ready = len(srv.state.ready) == len(srv.state.watchedBuckets())
	for name, e := range srv.state.watchErrors {
		a.Watch = append(a.Watch, name+": "+e)
	}
	srv.state.mu.Unlock()
	writeJSON(w, http.StatusOK, a)
}

// handleFleet is GET /api/v1/fleet: `sluice get nodes -o json`.
func (srv *Server) handleFleet(w http.ResponseWriter, _ *http.Request) {
	srv.state.mu.Lock()
	nodes, bad := srv.state.fleet(), srv.state.unreadableIn(contract.BucketNodes, contract.BucketStatus)
	srv.state.mu.Unlock()
	items, err := view.NodeObjects(nodes)
	srv.writeList(w, items, bad, err)
}

// handleRollouts is GET /api/v1/rollouts: `sluice get rollouts -o json`.
func (srv *Server) handleRollouts(w http.ResponseWriter, _ *http.Request) {
	srv.state.mu.Lock()
	rs, bad := srv.state.rolloutsNewestFirst(), srv.state.unreadableIn(contract.BucketRollouts)
	srv.state.mu.Unlock()
	items, err := view.ProtoObjects(rs)
	srv.writeList(w, items, bad, err)
}

func (srv *Server) writeList(w http.ResponseWriter, items []json.RawMessage, bad []view.Unreadable, err error) {
	if err != nil {
		httpError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, view.NewList(items, bad))
}

// names are what a rollout id or node name may look like in a path.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)

// pathName is the path value field, answering 400 when it is not a name.
func pathName(w http.ResponseWriter, r *http.Request, field, what, lister string) (string, bool) {
	v := r.PathValue(field)
	if !validName.MatchString(v) {
		httpError(w, http.StatusBadRequest, field, what+" "+quote(v)+" is not a "+what+" ("+lister+" lists them)")
		return "", false
	}
	return v, true
}

// handleRollout is GET /api/v1/rollouts/{id}: the stored record, as
// `sluice rollout status ID -o json` prints its one item ("active" is the
// active rollout).
func (srv *Server) handleRollout(w http.ResponseWriter, r *http.Request) {
	id, ok := pathName(w, r, "id", "rollout id", "sluice get rollouts")
	if !ok {
		return
	}
	srv.state.mu.Lock()
	if id == contract.KeyActive {
		id = srv.state.active
	}
	ro, ok := srv.state.rollouts[id]
	srv.state.mu.Unlock()
	if !ok {
		httpError(w, http.StatusNotFound, "id", "no rollout "+quote(r.PathValue("id"))+" (sluice get rollouts lists them)")
		return
	}
	b, err := view.JSON(ro)
	if err != nil {
		httpError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	writeRaw(w, b)
}

// nodeAnswer is GET /api/v1/nodes/{name}: the node as `sluice get nodes -o
// json` prints it, with the desired config and the backup the coordinator
// wrote for it (stored DesiredConfig objects; absent when none).
type nodeAnswer struct {
	view.NodeObject
	Desired    json.RawMessage   `json:"desired,omitempty"`
	Backup     json.RawMessage   `json:"backup,omitempty"`
	Unreadable []view.Unreadable `json:"unreadable"`
	// Diff is the desired config against the backup, intent by intent, as
	// `sluice diff` words it ("+" the desired config adds, "-" it drops,
	// "~" it changes); empty when they are equal or either is missing.
	Diff []view.ConfigChange `json:"diff"`
	// Operations are the node's own events (sluice.events.node.<name>),
	// oldest first, the newest nodeEvents of them: every operation the
	// coordinator started on it and what became of it.
	Operations []json.RawMessage `json:"operations"`
}

// nodeEvents is how many of a node's events its answer carries.
const nodeEvents = 50

func (srv *Server) handleNode(w http.ResponseWriter, r *http.Request) {
	name, ok := pathName(w, r, "name", "node name", "sluice get nodes")
	if !ok {
		return
	}
	srv.state.mu.Lock()
	n, found := srv.state.node(name)
	var obj json.RawMessage
	var err error
	if found {
		obj, err = n.Object()
	}
	srv.state.mu.Unlock()
	if !found {
		httpError(w, http.StatusNotFound, "name", "no node "+quote(name)+" (sluice get nodes lists them)")
		return
	}
	a := nodeAnswer{Unreadable: []view.Unreadable{}, Diff: []view.ConfigChange{}, Operations: []json.RawMessage{}}
	if err == nil {
		err = json.Unmarshal(obj, &a.NodeObject)
	}
	if err != nil {
		httpError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	kv, err := srv.opts.JS.KeyValue(r.Context(), contract.BucketNodeConfigs)
	if err != nil {
		httpError(w, http.StatusBadGateway, "", "open bucket "+contract.BucketNodeConfigs+": "+err.Error())
		return
	}
	configs := store.New(kv, func() *sluicev1.DesiredConfig { return &sluicev1.DesiredConfig{} })
	var desired, backup *sluicev1.DesiredConfig
	for _, c := range []struct {
		key string
		dst *json.RawMessage
		val **sluicev1.DesiredConfig
	}{{contract.DesiredKey(name), &a.Desired, &desired}, {contract.BackupKey(name), &a.Backup, &backup}} {
		e, err := configs.Get(r.Context(), c.key)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case errors.Is(err, store.ErrUndecodable):
			a.Unreadable = append(a.Unreadable, view.NewUnreadable(contract.BucketNodeConfigs, c.key, err))
		case err != nil:
			httpError(w, http.StatusBadGateway, "", err.Error())
			return
		default:
			*c.val = e.Value
			if *c.dst, err = view.JSON(e.Value); err != nil {
				httpError(w, http.StatusInternalServerError, "", err.Error())
				return
			}
		}
	}
	if desired != nil && backup != nil {
		a.Diff = view.ConfigDiff(backup.GetConfig(), desired.GetConfig())
	}
	if a.Operations, err = srv.nodeOperations(r.Context(), name); err != nil {
		httpError(w, http.StatusBadGateway, "", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// nodeOperations reads the newest nodeEvents events of node name, oldest
// first, as the stream sends events. The subject filter has the server
// pick them: no scan here of the events of other nodes.
func (srv *Server) nodeOperations(ctx context.Context, name string) ([]json.RawMessage, error) {
	out := []json.RawMessage{}
	stream, err := srv.opts.JS.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return out, fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	// Every role's events about the node: its own and the coordinator's,
	// the reaper's and an operator's, each on its role's subject.
	subjects := contract.EventFilterSubjects(contract.KindNode, name)
	subject := strings.Join(subjects, ", ")
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects})
	if err != nil {
		return out, fmt.Errorf("read %s: %w", subject, err)
	}
	pending := cons.CachedInfo().NumPending
	for pending > 0 {
		batch, err := cons.Fetch(int(min(pending, 500)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, fmt.Errorf("read %s: %w", subject, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return out, err
			}
			out = append(out, eventJSON(msg.Subject(), msg.Data(), meta))
			if len(out) > nodeEvents {
				out = out[1:]
			}
			pending = meta.NumPending
		}
		if batch.Error() != nil {
			return out, fmt.Errorf("read %s: %w", subject, batch.Error())
		}
		if got == 0 {
			break
		}
	}
	return out, nil
}

func writeRaw(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// unreadableIn is the unreadable values of buckets; the caller holds mu.
func (s *state) unreadableIn(buckets ...string) []view.Unreadable {
	var out []view.Unreadable
	for _, u := range s.unreadableList() {
		for _, b := range buckets {
			if u.Bucket == b {
				out = append(out, u)
			}
		}
	}
	return out
}
