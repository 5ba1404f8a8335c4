package cli

// sluice backup FILE and sluice restore FILE: the store's state in one
// file, and back into a store that lost it (docs/operations.md, "Disaster
// recovery").
//
// A backup holds every key of the buckets that say what the fleet should
// run and why — intents, revisions (with the head), nodeconfigs (desired
// and backup of every node), fingerprints, rollouts, control (minus the
// pause, which is the moment's, and a store confirmation), registries —
// as the stored bytes (a value that does not decode is kept as it is), and
// the events stream's last sequence. It leaves out what lives only while
// its writer does: presence (nodes), status (each agent writes its own
// again), leases and instances. A sha256 over the rest guards the file.
//
// A restore refuses before writing anything unless: the file is whole;
// every value decodes for its bucket and key; the store holds no rollout,
// revision or intent (it is empty or lost); the backup was taken at rest
// (no active rollout); and every live node that says what it runs
// (presence, from its last-good) runs what the backup's desired config for
// it says, and every node it has a desired config for is present (or the
// operator says those are gone: --allow-absent). The last checks are what
// make a restore safe: a desired config written back is republished to its
// agent, and one older than what the node runs would be applied at once,
// outside any rollout.
//
// It writes with Create (a key that exists is kept and named), in an order
// no service can act on half-way: control, registries, fingerprints,
// rollouts, nodeconfigs, intents, revisions, the head last. The
// coordinator's _fence keys are written back too, so a coordinator that
// leads the emptied store cannot write again until it reloads its term
// from what was restored. Then the events stream continues after the
// backup's last sequence (the events written since the loss are published
// again after it), and StoreRestored is emitted.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/events"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// backupVersion is the file format's version.
const backupVersion = 1

// backedUp are the buckets a backup holds, in the order a restore writes
// them (the head, in revisions, is written last of all).
var backedUp = []string{contract.BucketControl, contract.BucketRegistries, contract.BucketFingerprints,
	contract.BucketRollouts, contract.BucketNodeConfigs, contract.BucketIntents, contract.BucketRevisions}

// backupFile is a backup as stored (JSON).
type backupFile struct {
	Version       int            `json:"version"`
	TakenAt       time.Time      `json:"takenAt"`
	By            string         `json:"by"`
	EventsLastSeq uint64         `json:"eventsLastSeq"`
	Buckets       []backupBucket `json:"buckets"`
	SHA256        string         `json:"sha256"` // of the file with this field empty
}

type backupBucket struct {
	Name    string        `json:"name"`
	Entries []backupEntry `json:"entries"`
}

type backupEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"` // the stored bytes (base64 in the file)
}

func (f backupFile) sum() (string, error) {
	f.SHA256 = ""
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// skipped reports whether key of bucket is left out of a backup: the
// pause, a store confirmation and the store's identity (a restored store
// is another store: its manager gave it an id of its own), and every
// control key but the fence (the coordinator's throwaway fence checks).
func skipped(bucket, key string) bool {
	if contract.IsControlKey(key) {
		return key != contract.KeyFence
	}
	return bucket == contract.BucketControl && (key == contract.KeyPause || strings.HasPrefix(key, contract.KeyPause+".") || key == contract.KeyStoreConfirm || key == contract.KeyStoreID)
}

func (a *app) backupCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Write the store's state (intents, revisions, node configs, rollouts, …) to FILE",
		Long: `Writes every key of the buckets that say what the fleet should run and why —
intents, revisions and the head, every node's desired and backup config,
fingerprints, rollouts, control requests (not the pause), registries — and
the events stream's last sequence to FILE (JSON, with a sha256), for
'sluice restore FILE' after a lost store. Presence, status, leases and
instances are left out: their writers write them again. Take it at rest (no
rollout running): a restore refuses a backup taken mid-rollout.`,
		Example: "  sluice backup sluice-$(date +%F).json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.backup(cmd.Context(), args[0])
		},
	}
}

func (a *app) restoreCommand() *cobra.Command {
	var allowAbsent bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a store that was lost from a 'sluice backup' FILE",
		Long: `Checks FILE (its sha256, every value against its bucket and key), that the
store is empty or lost (no rollout, revision or intent), that the backup was
taken at rest, and that every live node runs what the backup's desired config
for it says; then writes it back (a key that exists is kept and named), the
head last, continues the events stream after the backup's last sequence and
emits StoreRestored. Nothing is written when a check fails. A node the backup
has a desired config for but that has no presence is refused too (its agent
may not have registered since the loss yet: wait one heartbeat); pass
--allow-absent when those nodes are gone. Exit 0 restored, 1 refused.`,
		Example: "  sluice restore sluice-2026-12-01.json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.restore(cmd.Context(), args[0], allowAbsent)
		},
	}
	cmd.Flags().BoolVar(&allowAbsent, "allow-absent", false, "restore although nodes the backup configures have no presence (they are gone)")
	return cmd
}

func (a *app) backup(ctx context.Context, path string) error {
	sn, err := a.bind(ctx, append(slices.Clone(backedUp), contract.BucketRollouts)...)
	if err != nil {
		return err
	}
	defer sn.Close()
	f := backupFile{Version: backupVersion, TakenAt: a.now().UTC(), By: a.operator()}
	if _, err := sn.kv[contract.BucketRollouts].Get(ctx, contract.KeyActive); err == nil {
		return &ExitError{Code: 1, Err: errors.New("a rollout is running: take the backup at rest (sluice rollout status --watch, then again)")}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read %s/%s: %w", contract.BucketRollouts, contract.KeyActive, err)
	}
	n := 0
	for _, name := range backedUp {
		kv := sn.kv[name]
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		var ks []string
		for k := range keys.Keys() {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		bb := backupBucket{Name: name}
		for _, k := range ks {
			if skipped(name, k) {
				continue
			}
			e, err := kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // deleted since it was listed
			}
			if err != nil {
				return fmt.Errorf("read %s/%s: %w", name, k, err)
			}
			bb.Entries = append(bb.Entries, backupEntry{Key: k, Value: e.Value()})
			n++
		}
		f.Buckets = append(f.Buckets, bb)
	}
	st, err := sn.js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return fmt.Errorf("open stream %s: %w", contract.StreamEvents, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream %s: %w", contract.StreamEvents, err)
	}
	f.EventsLastSeq = info.State.LastSeq
	if f.SHA256, err = f.sum(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the backup: %w", err)
	}
	fmt.Fprintf(a.streams.Out, "backed up %d keys of %d buckets and the events' last sequence %d to %s\n", n, len(backedUp), f.EventsLastSeq, path)
	return nil
}

// readBackup reads and checks path: its version, its sha256, and every
// value against its bucket and key.
func readBackup(path string) (backupFile, error) {
	var f backupFile
	b, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("read the backup: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("backup %s is not a sluice backup: %w", path, err)
	}
	if f.Version != backupVersion {
		return f, fmt.Errorf("backup %s has version %d; this sluice reads version %d", path, f.Version, backupVersion)
	}
	sum, err := f.sum()
	if err != nil {
		return f, err
	}
	if sum != f.SHA256 {
		return f, fmt.Errorf("backup %s is damaged: its sha256 is %s, the file says %s (edited or cut short?)", path, sum, f.SHA256)
	}
	for _, bb := range f.Buckets {
		if !slices.Contains(backedUp, bb.Name) {
			return f, fmt.Errorf("backup %s holds bucket %q, which a backup never holds", path, bb.Name)
		}
		for _, e := range bb.Entries {
			if err := checkValue(bb.Name, e.Key, e.Value); err != nil {
				return f, fmt.Errorf("backup %s: %s/%s: %w; nothing was restored", path, bb.Name, e.Key, err)
			}
		}
	}
	return f, nil
}

// checkValue decodes v as what bucket holds under key (a control key of a
// fenced bucket is a Fence).
func checkValue(bucket, key string, v []byte) error {
	var m proto.Message
	switch bucket {
	case contract.BucketIntents:
		m = &sluicev1.StoredIntent{}
	case contract.BucketRevisions:
		switch key {
		case contract.KeyHead:
			m = &sluicev1.Head{}
		case contract.KeyPending:
			m = &sluicev1.ApplyJournal{}
		default:
			m = &sluicev1.Revision{}
		}
	case contract.BucketNodeConfigs:
		m = &sluicev1.DesiredConfig{}
	case contract.BucketFingerprints:
		m = &sluicev1.InvalidFingerprint{}
	case contract.BucketRollouts:
		m = &sluicev1.Rollout{}
		if key == contract.KeyActive || key == contract.KeyLastApplied {
			m = &sluicev1.RolloutRef{}
		}
	case contract.BucketRegistries:
		m = &sluicev1.RegistryStatus{}
	case contract.BucketControl:
		return nil // many types by key; the services check what they read, as for any control request
	}
	if contract.IsControlKey(key) {
		m = &sluicev1.Fence{}
	}
	return store.Decode(bucket, key, v, m)
}

func (a *app) restore(ctx context.Context, path string, allowAbsent bool) error {
	f, err := readBackup(path)
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	sn, err := a.bind(ctx, append(slices.Clone(backedUp), contract.BucketNodes)...)
	if err != nil {
		return err
	}
	defer sn.Close()
	if err := refuseRestore(ctx, sn, f, allowAbsent); err != nil {
		return &ExitError{Code: 1, Err: fmt.Errorf("%w; nothing was restored", err)}
	}
	var kept []string
	n := 0
	var head *backupEntry
	for _, bb := range f.Buckets {
		kv := sn.kv[bb.Name]
		for i, e := range bb.Entries {
			if bb.Name == contract.BucketRevisions && e.Key == contract.KeyHead {
				head = &bb.Entries[i]
				continue
			}
			wrote, err := restoreKey(ctx, kv, e)
			if err != nil {
				return fmt.Errorf("restore %s/%s after %d keys (run restore again: it keeps what it wrote): %w", bb.Name, e.Key, n, err)
			}
			if !wrote {
				kept = append(kept, bb.Name+"/"+e.Key)
				continue
			}
			n++
		}
	}
	if head != nil {
		if _, err := restoreKey(ctx, sn.kv[contract.BucketRevisions], *head); err != nil {
			return fmt.Errorf("restore the head after %d keys (run restore again: it keeps what it wrote): %w", n, err)
		}
		n++
	}
	moved, err := continueEvents(ctx, sn.js, f.EventsLastSeq)
	if err != nil {
		return fmt.Errorf("restored %d keys, but the events stream does not continue after sequence %d: %w", n, f.EventsLastSeq, err)
	}
	em := events.NewEmitter(sn.js, zerolog.Nop(), contract.ComponentCLI, a.now)
	em.Emit(&sluicev1.Event{Kind: contract.KindStore, Id: contract.IDStore, Type: contract.EventStoreRestored,
		Reason: fmt.Sprintf("%s restored %d keys from %s (taken %s by %s); events continue after sequence %d", a.operator(), n, path,
			f.TakenAt.Format(time.RFC3339), f.By, f.EventsLastSeq)})
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	em.Flush(fctx)
	fmt.Fprintf(a.streams.Out, "restored %d keys from %s (taken %s by %s); the events continue after sequence %d (%d written since the loss published again)\n",
		n, path, f.TakenAt.Format(time.RFC3339), f.By, f.EventsLastSeq, moved)
	if len(kept) > 0 {
		fmt.Fprintf(a.streams.Out, "kept the value the store already had for %d keys: %s\n", len(kept), strings.Join(kept, ", "))
	}
	return nil
}

// refuseRestore says why f must not be restored into the store sn reads,
// nil when it may.
func refuseRestore(ctx context.Context, sn *session, f backupFile, allowAbsent bool) error {
	for _, name := range []string{contract.BucketRollouts, contract.BucketRevisions, contract.BucketIntents} {
		keys, err := sn.kv[name].ListKeys(ctx)
		if err != nil {
			return fmt.Errorf("list %s: %w", name, err)
		}
		for k := range keys.Keys() {
			if !contract.IsControlKey(k) {
				_ = keys.Stop()
				return fmt.Errorf("the store is not empty (%s/%s exists): a restore writes only into an empty or lost store", name, k)
			}
		}
	}
	desired := map[string]string{} // node → the backup's desired fingerprint
	for _, bb := range f.Buckets {
		for _, e := range bb.Entries {
			if bb.Name == contract.BucketRollouts && e.Key == contract.KeyActive {
				return errors.New("the backup was taken while a rollout ran: restore one taken at rest")
			}
			if bb.Name != contract.BucketNodeConfigs || contract.IsControlKey(e.Key) {
				continue
			}
			if node, ok := strings.CutSuffix(e.Key, ".desired"); ok {
				d := &sluicev1.DesiredConfig{}
				if err := store.Decode(bb.Name, e.Key, e.Value, d); err == nil {
					desired[node] = d.GetFingerprint()
				}
			}
		}
	}
	presences, err := store.New(sn.kv[contract.BucketNodes], func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} }).List(ctx, ">")
	if err != nil {
		return fmt.Errorf("list %s: %w", contract.BucketNodes, err)
	}
	var differ []string
	present := map[string]bool{}
	for _, p := range presences {
		present[p.Key] = true
	}
	var absent []string
	for node := range desired {
		if !present[node] {
			absent = append(absent, node)
		}
	}
	if len(absent) > 0 && !allowAbsent {
		slices.Sort(absent)
		return fmt.Errorf("the backup has desired configs for nodes with no presence (%s): their agents may not have registered since the loss yet "+
			"(wait one heartbeat, a minute at the default node lease, and check what they run with 'sluice get nodes'); pass --allow-absent if they are gone",
			strings.Join(absent, ", "))
	}
	for _, p := range presences {
		runs := p.Value.GetInForceFingerprint()
		if p.Err != nil || runs == "" || desired[p.Key] == runs {
			continue
		}
		want := "no desired config"
		if fp := desired[p.Key]; fp != "" {
			want = "desired " + short(fp)
		}
		differ = append(differ, fmt.Sprintf("%s runs %s, the backup has %s", p.Key, short(runs), want))
	}
	if len(differ) > 0 {
		slices.Sort(differ)
		return fmt.Errorf("the backup is not what the fleet runs (%s): written back, its desired configs would be applied at once, outside any rollout; "+
			"restore a newer backup, or run 'sluice recover --confirm-empty' and apply the intents", strings.Join(differ, "; "))
	}
	return nil
}

// restoreKey writes e with Create; a key that exists is kept (false),
// except a fenced bucket's _fence, which is written over at its revision:
// it fences off the coordinator leading the emptied store.
func restoreKey(ctx context.Context, kv jetstream.KeyValue, e backupEntry) (bool, error) {
	_, err := kv.Create(ctx, e.Key, e.Value)
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return err == nil, err
	}
	if e.Key != contract.KeyFence {
		return false, nil
	}
	cur, err := kv.Get(ctx, e.Key)
	if err != nil {
		return false, err
	}
	_, err = kv.Update(ctx, e.Key, e.Value, cur.Revision())
	return err == nil, err
}

// continueEvents makes the events stream's next sequence follow last: the
// events stored since the loss (sequences up to last, in an emptied
// stream) are read, purged, and published again after it. It returns how
// many it published again. A stream already past last is left alone.
func continueEvents(ctx context.Context, js jetstream.JetStream, last uint64) (int, error) {
	st, err := js.Stream(ctx, contract.StreamEvents)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.State.LastSeq > last {
		return 0, nil
	}
	var since []*nats.Msg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		since = append(since, &nats.Msg{Subject: m.Subject, Data: m.Data, Header: m.Header})
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(last+1)); err != nil {
		return 0, err
	}
	for _, m := range since {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return 0, err
		}
	}
	return len(since), nil
}
