package hostnet

// SimulateOps returns the links ops lead to from current, as Diff models
// the kernel: the tests check that Diff's ops reach the desired state.
func SimulateOps(current Desired, ops []Op) Desired {
	p := newPlan(current)
	for _, op := range ops {
		simulate(p.state, op)
	}
	var d Desired
	for _, l := range p.state {
		d.Links = append(d.Links, l)
	}
	d.normalize()
	return d
}
