// Package interruption owns one concept: EC2's early word that spot or Capacity Block
// capacity is going away, turned into which strategy terms are at risk now. It reads
// EC2 events from an SQS queue of the user's (EventBridge rules for "EC2 Spot Instance
// Interruption Warning", "EC2 Instance Rebalance Recommendation", "EC2 Instance
// State-change Notification" and a Capacity Block's expiration warning), and answers
// the convergence loop's question about one term.
//
//   - message.go decodes one EventBridge event (decode): its kind, instance (or a
//     Capacity Block's reservation and end), time, account and region; anything else
//     is refused with a reason.
//   - risk.go is the rule, a pure function (Rule.Assess): a term is at risk when
//     signals within the window reach a share of its nodes (and a minimum count), or
//     one of its nodes is on a Capacity Block whose end was announced (until the end).
//   - nodes.go is the node view the tracker reads (Nodes): the node of an instance by
//     spec.providerID, and every node's labels; NodesOf reads it from the capacity
//     catalog's Node watch, so signals add no watch of their own.
//   - tracker.go keeps the signals per instance, not per node name (EKS node names
//     come from private IPs, which EC2 reuses; duplicates, reordering and stale events
//     tolerated), and the ending Capacity Blocks per reservation (a node is on one by
//     Karpenter's karpenter.k8s.aws/capacity-reservation-id label), and answers Assess
//     for a term; metrics.go holds its metrics.
//   - poller.go long-polls the queue with aws-sdk-go-v2's SQS client and deletes what
//     it handled; a missing queue or a denied access is logged and counted, and
//     retried.
//   - signals.go builds the tracker and the poller from Settings (NewSignals) and runs
//     them on the elected replica.
//
// It acts on nothing itself: the convergence loop marks a term at risk in the
// unavailability records and moves pods through its own budgeted eviction path.
//
// It may import strategy (a term's labels), providerid (what an instance id is),
// aws-sdk-go-v2 (config, sqs), the Prometheus client and logrus; never converge, which
// asks it.
package interruption
