package contract

import "hash/fnv"

// VRFTableSpan is how many kernel tables the VRFs without a routing table
// of their own are spread over, from the agent's VRF table base.
const VRFTableSpan = 100000

// VRFTableSlot is where in the span the VRF named vrf takes its kernel
// table when no routing table intent of its name binds one: FNV-32a(vrf)
// % VRFTableSpan, added to the agent's base. The agent binds VRF devices by
// it (services/agent/hostnet) and the fleet verifier finds two VRFs that
// would want one table by it (pkg/verify): one rule, one home.
func VRFTableSlot(vrf string) uint32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(vrf))
	return f.Sum32() % VRFTableSpan
}
