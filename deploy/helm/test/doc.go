// Package charttest checks the helm chart in deploy/helm/sluice: it renders
// the chart with the helm SDK for several values files, decodes every
// object strictly into the Kubernetes API types, lints it, checks
// values.schema.json and the templates refuse bad values, and starts the
// real sluice binaries with the arguments, config and credentials the chart
// renders (credentials made by `sluice creds`). It is its own module so
// the helm SDK's dependencies stay out of the service binaries' build.
// No Kubernetes cluster is needed (or used).
package charttest
