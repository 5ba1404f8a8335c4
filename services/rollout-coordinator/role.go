package coordinator

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contract"
	"github.com/sluicehq/sluice/pkg/health"
)

// roles tracks what this instance knows of who leads — its own role, the
// term, the lease holder and since when — and shows it in three places:
// readiness (/readyz), the metrics (is_leader, term) and the micro service
// contract.CoordinatorService, whose metadata carries the role and term (so
// `nats micro info sluice-rollout-coordinator` lists each instance's) and
// whose status endpoint answers a contract.CoordinatorStatus.
//
// Ready means leading or standing by: an instance that cannot read the
// lease (or has not bound its buckets yet) could not take over, so it is not.
type roles struct {
	nc      *nats.Conn
	log     zerolog.Logger
	metrics *Metrics
	ready   health.State

	mu        sync.Mutex
	cur       contract.CoordinatorStatus
	svc       micro.Service // nil until registered, or when registering failed
	announced string        // role and term svc was registered with
}

func newRoles(nc *nats.Conn, instance, version string, log zerolog.Logger, m *Metrics) *roles {
	r := &roles{nc: nc, log: log, metrics: m, cur: contract.CoordinatorStatus{Instance: instance, Version: version}}
	r.ready.Set(false, "binding the buckets")
	return r
}

// bound: the buckets are bound; the lease is read next.
func (r *roles) bound() { r.ready.Set(false, "reading the leader lease") }

// leaseUnreadable: the lease could not be read, so this instance can
// neither lead nor tell who does.
func (r *roles) leaseUnreadable(err error) {
	r.ready.Set(false, "cannot read the leader lease: "+err.Error())
}

// standingBy: holder has held the lease since since, in term.
func (r *roles) standingBy(holder string, since time.Time, term uint64) {
	r.ready.Set(true, fmt.Sprintf("standing by, lease held by %s since %s", holder, since.UTC().Format(time.RFC3339)))
	r.metrics.role(false, term)
	r.set(RoleStandby, term, holder, since)
}

// acquired: this instance took the lease; the term starts once the buckets
// are fenced.
func (r *roles) acquired() {
	r.ready.Set(true, "acquired the leader lease; fencing the buckets for a new term")
}

// leading: this instance leads term since since.
func (r *roles) leading(term uint64, since time.Time) {
	r.ready.Set(true, fmt.Sprintf("leading term %d", term))
	r.metrics.role(true, term)
	r.set(RoleLeader, term, r.cur.Instance, since)
}

// termEnded: the term ended; the instance campaigns again at once.
func (r *roles) termEnded(term uint64) {
	r.ready.Set(true, fmt.Sprintf("term %d ended; campaigning for the lease again", term))
	r.metrics.role(false, 0)
	r.metrics.termEnded()
	r.set("", 0, "", time.Time{})
}

func (r *roles) status() contract.CoordinatorStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// set records the role and registers the micro service again when the
// role or the term changed: micro's metadata is fixed at registration.
func (r *roles) set(role string, term uint64, holder string, since time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Role, r.cur.Term, r.cur.LeaseHolder, r.cur.Since = role, term, holder, since
	key := fmt.Sprintf("%s/%d/%s", role, term, holder)
	if role == "" || key == r.announced && r.svc != nil {
		return
	}
	r.stopLocked()
	svc, err := micro.AddService(r.nc, micro.Config{
		Name:        contract.CoordinatorService,
		Version:     contract.ServiceVersion(r.cur.Version),
		Description: "sluice rollout-coordinator: leader-elected; the status endpoint answers who leads",
		Metadata: map[string]string{
			"instance": r.cur.Instance, "role": role, "term": fmt.Sprint(term), "lease_holder": holder,
			"since": since.UTC().Format(time.RFC3339), "build": r.cur.Version,
		},
		// `nats micro stats` shows each instance's status.
		StatsHandler: func(*micro.Endpoint) any { return r.status() },
	})
	if err == nil {
		err = svc.AddEndpoint("status", micro.HandlerFunc(func(req micro.Request) {
			b, _ := json.Marshal(r.status())
			_ = req.Respond(b)
		}), micro.WithEndpointSubject(contract.SubjectCoordinatorStatus))
		if err != nil {
			_ = svc.Stop()
		}
	}
	if err != nil {
		r.log.Warn().Err(err).Str("role", role).Msg("register micro service " + contract.CoordinatorService + "; registered again when its role is next announced (a standby: its next look at the lease)")
		return
	}
	r.svc, r.announced = svc, key
}

// stop unregisters the micro service.
func (r *roles) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *roles) stopLocked() {
	if r.svc != nil {
		_ = r.svc.Stop()
		r.svc, r.announced = nil, ""
	}
}
