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
	return labels
}
