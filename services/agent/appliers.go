package agent

import (
	"context"
	"errors"
	"fmt"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Validator is implemented by Appliers that can tell, before anything on
// the node changes, that they would refuse a config (the FRR applier has
// FRR's parser check the file it would reload). The agent calls Validate
// before every apply of a desired config, bounded by ApplierTimeout, before
// ValidateCmd: an error makes the config Invalid with failed_check
// "validate" and the error as its output, and nothing is applied. It is
// not called before a restore of last-good, which was accepted before.
//
// A Validate error that matches ErrNodeFault says the node, not the
// config, is at fault: the agent reports the config Invalid (nothing was
// applied) with NodeStatus.node_fault set, and the coordinator does not
// record its fingerprint invalid.
type Validator interface {
	Validate(ctx context.Context, cfg *sluicev1.DesiredConfig) error
}

// NamedApplier is one part of Appliers: an Applier and the name its
// errors carry ("netlink", "frr").
type NamedApplier struct {
	Name string
	Applier
}

// Appliers puts a config in force through several appliers as one
// operation: each in order (netlink's links before FRR's routing over
// them), stopping at the first error, which names its part. It does not
// undo the parts that succeeded: a failed apply makes the agent restore
// last-good through all of Appliers (the same order), which puts every part
// back on last-good — the parts before the failure by applying it, the
// failed one too. Validate validates every part that is a Validator,
// before any part applies anything.
type Appliers []NamedApplier

var (
	_ Applier   = Appliers{}
	_ Validator = Appliers{}
)

// Apply applies cfg through each part in order.
func (as Appliers) Apply(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	if len(as) == 0 {
		return errors.New("apply: no applier")
	}
	for i, a := range as {
		if err := a.Apply(ctx, cfg); err != nil {
			if i > 0 {
				return fmt.Errorf("%s applier (after %s applied): %w", a.Name, names(as[:i]), err)
			}
			return fmt.Errorf("%s applier: %w", a.Name, err)
		}
	}
	return nil
}

// Validate runs every part's Validate, in order, and reports the first
// refusal.
func (as Appliers) Validate(ctx context.Context, cfg *sluicev1.DesiredConfig) error {
	for _, a := range as {
		if v, ok := a.Applier.(Validator); ok {
			if err := v.Validate(ctx, cfg); err != nil {
				return fmt.Errorf("%s applier: %w", a.Name, err)
			}
		}
	}
	return nil
}

func names(as Appliers) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += ", "
		}
		s += a.Name
	}
	return s
}
