// Package wellformed is the one table of what each key of each sluice
// bucket holds and what makes that value well-formed. pkg/store applies it
// to every value it reads (Get, List, Watch): a value that fails is
// quarantined as one that does not decode (store.ErrUndecodable, with the
// reason), so it never reaches a decision as an empty or zero value.
//
// Why a check beyond decoding: values are protojson read with
// DiscardUnknown, so valid JSON of ANOTHER message type decodes without
// error as an empty value (a fence written to <node>.backup reads as a
// backup with no fingerprint and no config). Every rule below therefore
// asks for what every writer always sets — most often that the value names
// its own key — which a value of another type never carries.
//
// It is a package of its own, beside pkg/contract rather than in it, only
// because the rules need render (fingerprints) and intent (intent keys),
// which import contract.
package wellformed

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/intent"
	"github.com/sluicehq/sluice/pkg/render"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Check reports why v, read from bucket at key, is not a well-formed value
// for that key, or nil. A bucket sluice does not know is not checked (nil).
func Check(bucket, key string, v proto.Message) error {
	r, ok := buckets[bucket]
	if !ok {
		return nil
	}
	return r(key, v)
}

// Known reports whether Check has rules for bucket.
func Known(bucket string) bool { _, ok := buckets[bucket]; return ok }

// buckets maps every bucket to the function that checks its keys: one
// function per bucket, each saying which type each key holds.
var buckets = map[string]func(key string, v proto.Message) error{
	contract.BucketIntents:      intents,
	contract.BucketRevisions:    revisions,
	contract.BucketNodeConfigs:  nodeConfigs,
	contract.BucketFingerprints: fingerprints,
	contract.BucketStatus:       statuses,
	contract.BucketNodes:        presences,
	contract.BucketRollouts:     rollouts,
	contract.BucketLeases:       leases,
	contract.BucketControl:      control,
	contract.BucketInstances:    instances,
	contract.BucketRegistries:   registries,
}

// as returns v as a T, or an error saying the key holds a T (the reader
// asked for another type: the key is not one of its values).
func as[T proto.Message](v proto.Message) (T, error) {
	t, ok := v.(T)
	if !ok {
		var want T
		return t, fmt.Errorf("the key holds a %s, not a %s", want.ProtoReflect().Descriptor().Name(), v.ProtoReflect().Descriptor().Name())
	}
	return t, nil
}

// check runs rule on v as a T.
func check[T proto.Message](v proto.Message, rule func(T) error) error {
	t, err := as[T](v)
	if err != nil {
		return err
	}
	return rule(t)
}

// control keys: KeyFence holds the term fence; any other "_" key is a
// fence check, written with no value, never read as one.
func controlKey(key string, v proto.Message) error {
	if key != contract.KeyFence {
		return errors.New("a fence check key holds no value")
	}
	return check(v, fence)
}

func fence(f *sluicev1.Fence) error {
	if f.GetEpoch() == 0 || f.GetHolder() == "" {
		return errors.New("a fence names its term's epoch and holder; this one does not (a value of another type?)")
	}
	return nil
}

// names is the shared "the value names its key" rule.
func names(what, got, want string) error {
	if got != want {
		return fmt.Errorf("it names %s %q, not %q as its key does (a value of another type, or one copied from another key)", what, got, want)
	}
	return nil
}

func intents(key string, v proto.Message) error {
	return check(v, func(s *sluicev1.StoredIntent) error {
		if s.GetIntent() == nil || intent.Kind(s.GetIntent()) == "" {
			return errors.New("it holds no intent (a value of another type?)")
		}
		return names("intent", intent.Key(s.GetIntent()), key)
	})
}

func revisions(key string, v proto.Message) error {
	switch {
	case key == contract.KeyHead:
		return check(v, func(h *sluicev1.Head) error {
			if h.GetRevision() == "" {
				return errors.New("the head names no revision (a value of another type?)")
			}
			return nil
		})
	case key == contract.KeyPending:
		return check(v, func(j *sluicev1.ApplyJournal) error {
			if !j.GetHasPrior() && j.GetSource() == "" && len(j.GetIntents()) == 0 && len(j.GetMark()) == 0 {
				return errors.New("the apply journal holds no apply: no source, intents, marks or priors (a value of another type?)")
			}
			return nil
		})
	case contract.IsControlKey(key):
		return errors.New("a fence check key holds no value")
	}
	return check(v, func(r *sluicev1.Revision) error { return names("revision", r.GetId(), key) })
}

// nodeConfigs: <node>.desired and <node>.backup hold a DesiredConfig that
// names the node and carries a config whose fingerprint it states — what
// an agent verifies before applying, and what a revert writes back.
func nodeConfigs(key string, v proto.Message) error {
	if contract.IsControlKey(key) {
		return controlKey(key, v)
	}
	node, which, ok := contract.NodeOfConfigKey(key)
	if !ok || (which != "desired" && which != "backup") {
		return errors.New("not a key of this bucket: want <node>.desired or <node>.backup")
	}
	return check(v, func(d *sluicev1.DesiredConfig) error { return DesiredConfig(node, d) })
}

// DesiredConfig reports why d cannot be node's desired config or backup:
// it must name node, carry a config and a fingerprint, and the fingerprint
// must be the config's. The coordinator checks its own writes with it too.
func DesiredConfig(node string, d *sluicev1.DesiredConfig) error {
	if err := names("node", d.GetNode(), node); err != nil {
		return err
	}
	if d.GetFingerprint() == "" || d.GetConfig() == nil {
		return errors.New("it carries no fingerprint or no config (a value of another type?)")
	}
	if got := render.Fingerprint(d.GetConfig()); got != d.GetFingerprint() {
		// %.12s cuts by runes: the stored fingerprint need not be hex.
		return fmt.Errorf("its fingerprint %.12s does not match its config (%s)", d.GetFingerprint(), render.Short(got))
	}
	return nil
}

func fingerprints(key string, v proto.Message) error {
	if contract.IsControlKey(key) {
		return controlKey(key, v)
	}
	return check(v, func(f *sluicev1.InvalidFingerprint) error { return names("fingerprint", f.GetFingerprint(), key) })
}

func statuses(key string, v proto.Message) error {
	return check(v, func(s *sluicev1.NodeStatus) error {
		if err := names("node", s.GetNode(), key); err != nil {
			return err
		}
		// The node's labels, as its presence's: the agent writes none
		// that break the rules, and the dashboard places a departed node
		// by them.
		return errors.Join(contract.CheckLabels("the status's node_labels", s.GetNodeLabels(), contract.MaxNodeLabels)...)
	})
}

func presences(key string, v proto.Message) error {
	return check(v, func(p *sluicev1.NodePresence) error {
		if err := names("node", p.GetNode(), key); err != nil {
			return err
		}
		// The agent refuses labels that break the rules; a presence with
		// such labels (a hand write, a foreign writer) would otherwise put
		// unbounded text into every listing and selection.
		return errors.Join(contract.CheckLabels("the presence", p.GetLabels(), contract.MaxNodeLabels)...)
	})
}

// rollouts: <id> holds the Rollout record; active and last-applied a
// RolloutRef naming a rollout and its revision.
func rollouts(key string, v proto.Message) error {
	switch {
	case key == contract.KeyActive || key == contract.KeyLastApplied:
		return check(v, func(r *sluicev1.RolloutRef) error {
			if r.GetRollout() == "" || r.GetRevision() == "" {
				return errors.New("it names no rollout or no revision (a value of another type?)")
			}
			return nil
		})
	case contract.IsControlKey(key):
		return controlKey(key, v)
	}
	return check(v, func(r *sluicev1.Rollout) error { return names("rollout", r.GetId(), key) })
}

func leases(_ string, v proto.Message) error {
	return check(v, func(l *sluicev1.LeaderLease) error {
		if l.GetHolder() == "" || l.GetSession() == "" || l.GetAcquiredAt() == nil {
			// A fence has a holder and an epoch too; only a lease has a
			// session and the time it was acquired.
			return errors.New("the lease names no holder, session or time acquired (a value of another type?)")
		}
		return nil
	})
}

func instances(key string, v proto.Message) error {
	return check(v, func(i *sluicev1.Instance) error {
		return names("instance", contract.InstanceKey(i.GetComponent(), i.GetInstance()), key)
	})
}

func registries(key string, v proto.Message) error {
	return check(v, func(s *sluicev1.RegistryStatus) error { return names("registry", s.GetName(), key) })
}

// control: each key its request type (see contract.BucketControl).
func control(key string, v proto.Message) error {
	if key == contract.KeyPause {
		return check(v, func(p *sluicev1.PauseRequest) error { return pause(p, "") })
	}
	if key == contract.KeyStoreConfirm {
		return check(v, func(c *sluicev1.StoreConfirm) error {
			if c.GetBy() == "" || c.GetAt() == nil {
				return errors.New("the confirmation names no operator or no time (a value of another type?)")
			}
			return nil
		})
	}
	if key == contract.KeyStoreID {
		return check(v, func(id *sluicev1.StoreID) error {
			if id.GetId() == "" {
				return errors.New("the store identity has no id (a value of another type?)")
			}
			return nil
		})
	}
	if key == contract.KeyReapConfirm {
		return check(v, func(c *sluicev1.ReapConfirm) error {
			if len(c.GetNodes()) == 0 {
				return errors.New("the confirmation names no node (a value of another type?)")
			}
			return nil
		})
	}
	if name, spec, ok := contract.RegistryOfKey(key); ok {
		if spec {
			return check(v, func(s *sluicev1.RegistrySpec) error { return names("registry", s.GetName(), name) })
		}
		return check(v, func(c *sluicev1.RegistryConfirm) error {
			if c.GetDigest() == "" {
				return errors.New("the confirmation names no digest (a value of another type?)")
			}
			return nil
		})
	}
	prefix, rest, _ := strings.Cut(key, ".")
	switch {
	case rest == "":
	case prefix == contract.KeyPause:
		return check(v, func(p *sluicev1.PauseRequest) error { return pause(p, rest) })
	case contract.AbortKey(rest) == key:
		return check(v, func(a *sluicev1.AbortRequest) error { return names("rollout", a.GetRollout(), rest) })
	case contract.ForgiveKey(rest) == key:
		return check(v, func(f *sluicev1.ForgiveRequest) error { return names("fingerprint", f.GetFingerprint(), rest) })
	case contract.FreezeKey(rest) == key:
		return check(v, func(f *sluicev1.Freeze) error {
			if err := names("freeze", f.GetId(), rest); err != nil {
				return err
			}
			if f.GetFrom() == nil || f.GetTo() == nil || !f.GetTo().AsTime().After(f.GetFrom().AsTime()) {
				return errors.New("the freeze has no period from before to (a value of another type?)")
			}
			return nil
		})
	}
	return fmt.Errorf("not a key of this bucket: want %s, %s.<rollout>, %s, %s, %s, %s, %s, %s, %s or %s",
		contract.KeyPause, contract.KeyPause, contract.AbortKey("<rollout>"), contract.ForgiveKey("<fingerprint>"),
		contract.FreezeKey("<id>"), contract.KeyReapConfirm, contract.KeyStoreConfirm, contract.KeyStoreID, contract.RegistryKey("<name>"), contract.RegistryConfirmKey("<name>"))
}

// pause: every pause and resume is a new generation (from 1); a rollout's
// pause may name its rollout, which is then its key's.
func pause(p *sluicev1.PauseRequest, rollout string) error {
	if p.GetGeneration() == 0 {
		return errors.New("the pause request has no generation (a value of another type?)")
	}
	if rollout != "" && p.GetRollout() != "" {
		if err := names("rollout", p.GetRollout(), rollout); err != nil {
			return err
		}
	}
	return contract.ValidJoiners(p.GetJoiners())
}

// storedTypes are the types of every value kept in a sluice bucket (one per
// key, as the rules above say).
var storedTypes = []proto.Message{
	&sluicev1.StoredIntent{}, &sluicev1.Revision{}, &sluicev1.Head{}, &sluicev1.ApplyJournal{},
	&sluicev1.DesiredConfig{}, &sluicev1.Fence{}, &sluicev1.InvalidFingerprint{}, &sluicev1.NodeStatus{},
	&sluicev1.NodePresence{}, &sluicev1.Rollout{}, &sluicev1.RolloutRef{}, &sluicev1.LeaderLease{},
	&sluicev1.AbortRequest{}, &sluicev1.ForgiveRequest{}, &sluicev1.PauseRequest{}, &sluicev1.ReapConfirm{}, &sluicev1.StoreConfirm{},
	&sluicev1.RegistrySpec{}, &sluicev1.RegistryConfirm{}, &sluicev1.Instance{}, &sluicev1.RegistryStatus{},
}

// fieldOwners maps each top-level field name of a stored type (its JSON
// and its proto name) to the types that have it.
var fieldOwners = func() map[string][]string {
	out := map[string][]string{}
	for _, m := range storedTypes {
		d := m.ProtoReflect().Descriptor()
		fields := d.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			for _, n := range []string{f.JSONName(), string(f.Name())} {
				if !slices.Contains(out[n], string(d.Name())) {
					out[n] = append(out[n], string(d.Name()))
				}
			}
		}
	}
	return out
}()

// Foreign reports a value of another type: b decoded as v only once its
// unknown fields were dropped (the caller found that out), and one of them
// is a field of another stored type. Values are read with unknown fields
// dropped so that a value written by a newer version, with fields this one
// does not know, still reads; a field another stored type has is no such
// field, but the sign that the value is not v's type at all (a status
// written to a presence key reads as a presence with no labels). A newer
// version must therefore not name a new field as another stored type's.
// A minimal value of another type with no foreign field (a fence
// {"holder","epoch"} at a lease key) is left to the bucket's rule (Check).
func Foreign(v proto.Message, b []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil // not an object: the decoder refused it already
	}
	d := v.ProtoReflect().Descriptor()
	var foreign []string
	for _, name := range slices.Sorted(maps.Keys(top)) {
		if d.Fields().ByJSONName(name) != nil || d.Fields().ByName(protoreflect.Name(name)) != nil {
			continue
		}
		if owners := fieldOwners[name]; len(owners) > 0 {
			foreign = append(foreign, fmt.Sprintf("%q (a field of %s)", name, strings.Join(owners, ", ")))
		}
	}
	if len(foreign) > 0 {
		return fmt.Errorf("it carries %s, which a %s does not have: a value of another type", strings.Join(foreign, ", "), d.Name())
	}
	return nil
}
