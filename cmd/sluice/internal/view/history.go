package view

import "github.com/sluicehq/sluice/pkg/contract"

// HistoryCounts are the forward categories `sluice rollout history` and
// the dashboard's History panel give a column each (provisioned of the
// total, failed); the others that count a node are listed in one more,
// OTHER (contract.Tally.Rest), so that a row adds up to its total.
var HistoryCounts = []string{contract.CountProvisioned, contract.CountFailed}
