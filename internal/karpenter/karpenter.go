// Package karpenter names the parts of Karpenter's API that gpulab reads:
// its kinds, read as unstructured so that nothing here depends on
// Karpenter's Go module, and the label its nodes carry; and it is gpulab's
// one reader of a NodePool (ReadNodePool). The operator (capacity it can
// add) and the suite (the autoscaling feature) both use them.
package karpenter

import "k8s.io/apimachinery/pkg/runtime/schema"

// NodePoolKind and NodeClaimKind are Karpenter's karpenter.sh/v1 kinds.
var (
	NodePoolKind  = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodePool"}
	NodeClaimKind = schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodeClaim"}
)

// NodePoolLabel is the label Karpenter puts on the nodes (and NodeClaims)
// of a NodePool: karpenter.sh/nodepool=<name>.
const NodePoolLabel = "karpenter.sh/nodepool"
