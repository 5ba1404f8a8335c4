package dashboard

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/store"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// watched is one bucket the state follows (key: only that key of it; ""
// every key): apply decodes and stores a value (nil data: the key was
// deleted) and says whether it changed anything a viewer sees.
type watched struct {
	bucket string
	key    string
	opts   []jetstream.WatchOpt
	apply  func(key string, data []byte) (kind string, changed bool, err error)
}

// watchedBuckets is every bucket the state follows, with how each applies
// its values to s; apply runs with mu held.
func (s *state) watchedBuckets() []watched {
	return []watched{
		{contract.BucketNodes, "", nil, func(key string, data []byte) (string, bool, error) {
			ack := s.presences[key].GetPause()
			was := s.presences[key].GetInForceRevision()
			if old := s.presences[key]; old != nil && data == nil && s.statuses[key] != nil {
				s.departed[key] = old.GetLabels()
			} else if data != nil {
				delete(s.departed, key)
			}
			kind, changed, err := applyTo(kindNode, s.presences, key, data, func() *sluicev1.NodePresence { return &sluicev1.NodePresence{} },
				func(p *sluicev1.NodePresence) { p.HeartbeatAt = nil })
			if now := s.presences[key].GetInForceRevision(); now != was {
				s.inForce[was]--
				if s.inForce[was] <= 0 {
					delete(s.inForce, was)
				}
				s.inForce[now]++
			}
			if err == nil && !proto.Equal(ack, s.presences[key].GetPause()) {
				// An agent's presence is also its pause acknowledgement.
				s.note(kindPause, "", nil)
			}
			return kind, changed, err
		}},
		// The desired keys' metadata only (place.go: a node being written).
		{contract.BucketNodeConfigs, "", []jetstream.WatchOpt{jetstream.MetaOnly()}, nil},
		{contract.BucketStatus, "", nil, func(key string, data []byte) (string, bool, error) {
			if data == nil {
				delete(s.departed, key) // gone for good (the reaper's)
			}
			return applyTo(kindNode, s.statuses, key, data, func() *sluicev1.NodeStatus { return &sluicev1.NodeStatus{} }, nil)
		}},
		{contract.BucketRollouts, "", nil, func(key string, data []byte) (string, bool, error) {
			switch key {
			case contract.KeyLastApplied:
				s.lastApplied = data != nil // a value, readable or not: the store has a history (as storeloss.Read)
				was := s.appliedRollout
				err := s.noteApplied(data)
				return kindApplied, was != s.appliedRollout, err
			case contract.KeyActive:
				ref := &sluicev1.RolloutRef{}
				if data != nil {
					if err := store.Unmarshal(data, ref); err != nil {
						return kindActive, false, err
					}
				}
				changed := ref.GetRollout() != s.active
				s.active = ref.GetRollout()
				return kindActive, changed, nil
			}
			return applyTo(kindRollout, s.rollouts, key, data, func() *sluicev1.Rollout { return &sluicev1.Rollout{} }, nil)
		}},
		{contract.BucketFingerprints, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindFingerprint, s.fps, key, data, func() *sluicev1.InvalidFingerprint { return &sluicev1.InvalidFingerprint{} }, nil)
		}},
		{contract.BucketControl, "", nil, func(key string, data []byte) (string, bool, error) {
			if strings.HasPrefix(key, contract.KeyFreezePrefix+".") {
				return applyTo(kindFreeze, s.freezes, key, data, func() *sluicev1.Freeze { return &sluicev1.Freeze{} }, nil)
			}
			if key == contract.KeyStoreConfirm {
				// An unreadable confirmation confirms nothing (as storeloss.Read).
				s.confirmed = data != nil && store.Unmarshal(data, &sluicev1.StoreConfirm{}) == nil
				return "", false, nil
			}
			if key != contract.KeyPause {
				return "", false, nil
			}
			req := &sluicev1.PauseRequest{}
			if data != nil {
				if err := store.Unmarshal(data, req); err != nil {
					return kindPause, false, err
				}
			}
			changed := !proto.Equal(req, s.pause)
			s.pause = req
			return kindPause, changed, nil
		}},
		{contract.BucketInstances, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindInstance, s.instances, key, data, func() *sluicev1.Instance { return &sluicev1.Instance{} },
				func(in *sluicev1.Instance) { in.HeartbeatAt = nil })
		}},
		{contract.BucketLeases, "", nil, func(key string, data []byte) (string, bool, error) {
			if key != contract.LeaseCoordinator {
				return "", false, nil
			}
			var l *sluicev1.LeaderLease
			if data != nil {
				l = &sluicev1.LeaderLease{}
				if err := store.Unmarshal(data, l); err != nil {
					return kindLeader, false, err
				}
			}
			// A renewal alone changes nothing a viewer sees.
			changed := (l == nil) != (s.leader == nil) || l.GetHolder() != s.leader.GetHolder() ||
				l.GetEpoch() != s.leader.GetEpoch() || !proto.Equal(l.GetAcquiredAt(), s.leader.GetAcquiredAt())
			if l != nil && s.leader != nil && !sameTerm(l, s.leader) {
				s.lastTerm = s.leader // a takeover this dashboard saw
			}
			if l != nil {
				if s.leader == nil && s.lastTerm == nil && s.leaseEndTerm != nil && !sameTerm(s.leaseEndTerm, l) {
					s.lastTerm = s.leaseEndTerm
				}
				s.leader = l
			} else if s.leader != nil {
				s.leaseEndTerm = s.leader
				s.leader = nil
			}
			return kindLeader, changed, nil
		}},
		{contract.BucketRegistries, "", nil, func(key string, data []byte) (string, bool, error) {
			return applyTo(kindRegistry, s.registries, key, data, func() *sluicev1.RegistryStatus { return &sluicev1.RegistryStatus{} }, nil)
		}},
		// Only the head of sluice-revisions: the revisions themselves are
		// read one at a time, when a rollout or last-applied names one.
		{contract.BucketRevisions, contract.KeyHead, nil, func(_ string, data []byte) (string, bool, error) {
			was, wasBad := s.head, s.headBad
			s.head, s.headBad = nil, ""
			var err error
			if data != nil {
				h := &sluicev1.Head{}
				if err = store.Unmarshal(data, h); err != nil {
					s.headBad = err.Error()
				} else {
					s.head = h
				}
			}
			return kindHead, wasBad != s.headBad || !proto.Equal(was, s.head), err
		}},
	}
}

// sameTerm reports whether two values of the coordinator's lease are of
// one term: the same holder's session, acquired at the same time. The
// epoch does not tell: a new leader writes its lease with none, and
// publishes the term's epoch in it once its fence is written (the
// coordinator's announce), so epoch 0 then N is one term, not a takeover.
func sameTerm(a, b *sluicev1.LeaderLease) bool {
	return a.GetHolder() == b.GetHolder() && a.GetSession() == b.GetSession() && proto.Equal(a.GetAcquiredAt(), b.GetAcquiredAt())
}

// applyTo stores data (nil: delete) at key and says whether a viewer would
// see a difference: quiet clears what changes without meaning anything
// (a heartbeat), so that a heartbeat alone is not sent to every viewer.
func applyTo[T proto.Message](kind string, m map[string]T, key string, data []byte, newT func() T, quiet func(T)) (string, bool, error) {
	old, had := m[key]
	if data == nil {
		delete(m, key)
		return kind, had, nil
	}
	v := newT()
	if err := store.Unmarshal(data, v); err != nil {
		return kind, false, err
	}
	m[key] = v
	if !had {
		return kind, true, nil
	}
	if quiet == nil {
		return kind, !proto.Equal(old, v), nil
	}
	a, b := proto.Clone(old).(T), proto.Clone(v).(T)
	quiet(a)
	quiet(b)
	return kind, !proto.Equal(a, b), nil
}
