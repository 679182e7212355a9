package backend

// Label keys carried by every managed sandbox (container labels, Pod labels,
// process state files). They are the identity the reconciler adopts from when
// Redis has lost the record.
const (
	LabelManagedBy = "sandgate.managed-by"
	LabelSandboxID = "sandgate.sandbox-id"
	LabelUser      = "sandgate.user"
	LabelThread    = "sandgate.thread"
	LabelInstance  = "sandgate.instance"
	// LabelTemplate names the template a sandbox was made from (absent:
	// none, the backend's configuration alone).
	LabelTemplate = "sandgate.template"

	// ManagedByValue is the value of LabelManagedBy on sandboxes Sandgate made.
	ManagedByValue = "sandgate"
)

// IdentityLabels returns the labels that let a sandbox be found and adopted
// again, merged over extra (identity wins).
func IdentityLabels(spec Spec, instance string, extra map[string]string) map[string]string {
	labels := make(map[string]string, len(extra)+5)
	for k, v := range extra {
		labels[k] = v
	}
	labels[LabelManagedBy] = ManagedByValue
	labels[LabelSandboxID] = spec.SandboxID
	labels[LabelUser] = spec.User
	labels[LabelThread] = spec.Thread
	if instance != "" {
		labels[LabelInstance] = instance
	}
	if spec.Template.Name != "" {
		labels[LabelTemplate] = spec.Template.Name
	}
	return labels
}

// LabelFleet names the fleet (the gateways sharing one Redis) a sandbox
// belongs to. The reconciler and prune touch only their own fleet's
// sandboxes, so fleets sharing one engine or cluster never adopt or remove
// each other's.
const LabelFleet = "sandgate.fleet"

// DefaultFleet is the fleet of a gateway without a fleet setting.
const DefaultFleet = "default"

// InFleet reports whether labels name fleet. Cleanups (prune) act only on
// what positively carries their fleet: a sandbox without the label (made
// before it existed, or by another provisioner) is never theirs to remove.
func InFleet(labels map[string]string, fleet string) bool {
	return labels[LabelFleet] == fleet
}
