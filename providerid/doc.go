// Package providerid reads the cloud instance a Node's spec.providerID names, and says
// which strings can be instance ids: the one parser that the Node watch's index
// (karpenter) and the decoding of EC2's events (interruption) share, so an instance
// id read from a message and one read from a node always compare alike.
//
// It imports nothing of the module.
package providerid
