// Package unavailability holds the unavailability records: which terms of a workload
// revision have no capacity, until when, after how many strikes and why. One Lease per
// revision in the webhook's namespace, written by the convergence loop (the elected
// replica) and read by admission (their seats go to the fallback), spread and plan,
// none of which import the loop.
//
// It may import strategy (the protocol's keys), ownership and client-go.
package unavailability
