package api

// DeerFlow's provisioner API (/api), field for field.

// ProvisionerCreate is the body of POST /api/sandboxes.
type ProvisionerCreate struct {
	SandboxID       string       `json:"sandbox_id"`
	ThreadID        string       `json:"thread_id"`
	UserID          string       `json:"user_id"`
	RequiredVersion *int         `json:"required_mount_contract_version"`
	ExtraMounts     []ExtraMount `json:"extra_mounts"`
	// Egress (admins only) overrides the configured egress policy for this
	// sandbox, now and in every later incarnation (a Sandgate extension).
	Egress *Egress `json:"egress"`
	// Image is DeerFlow's image: the template whose image (or name) it
	// is makes the sandbox; any other image, the default template.
	Image string `json:"image,omitempty"`
	// Template names the template outright (a Sandgate extension; it wins
	// over Image).
	Template string `json:"template,omitempty"`
}

// ExtraMount is one entry of DeerFlow's extra_mounts.
type ExtraMount struct {
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
	ReadOnly      bool   `json:"read_only"`
}

// Egress is one sandbox's egress policy: mode none, proxy (the default) or
// open; Allow lists the names the proxy lets through.
type Egress struct {
	Mode  string   `json:"mode"`
	Allow []string `json:"allow,omitempty"`
}

// ProvisionerSandbox is one sandbox of the provisioner API.
type ProvisionerSandbox struct {
	SandboxID            string `json:"sandbox_id"`
	SandboxURL           string `json:"sandbox_url"`
	Status               string `json:"status"`
	UserID               string `json:"user_id"`
	ThreadID             string `json:"thread_id"`
	MountContractVersion int    `json:"mount_contract_version"`
	// ExtraMounts answers a create's extra_mounts.
	ExtraMounts []MountOutcome `json:"extra_mounts,omitempty"`
}

// MountOutcome is the answer for one requested mount (extra keys in the
// create response, which DeerFlow ignores).
type MountOutcome struct {
	ContainerPath string `json:"container_path"`
	Mounted       bool   `json:"mounted"`
	ReadOnly      bool   `json:"read_only"`
	Reason        string `json:"reason,omitempty"`
}

// ProvisionerList answers GET /api/sandboxes.
type ProvisionerList struct {
	Count     int                  `json:"count"`
	Sandboxes []ProvisionerSandbox `json:"sandboxes"`
}

// ProvisionerDeleted answers DELETE /api/sandboxes/{id}.
type ProvisionerDeleted struct {
	OK        bool   `json:"ok"`
	SandboxID string `json:"sandbox_id"`
}

// ProvisionerCapabilities answers DeerFlow's probe: its lark_cli keys say
// whether this provisioner supplies the lark-cli init and broker images.
type ProvisionerCapabilities struct {
	LarkCLIBrokerImage   bool `json:"lark_cli_broker_image"`
	LarkCLIInitImage     bool `json:"lark_cli_init_image"`
	MountContractVersion int  `json:"mount_contract_version"`
}

// ProvisionerDetail is an error of the provisioner API whose detail
// DeerFlow reads as FastAPI shapes it (a message, or an object), with the
// gateway's own error envelope beside it, as every other error has.
type ProvisionerDetail struct {
	Error  ErrorDetail `json:"error"`
	Detail any         `json:"detail"`
}

// MountContractChanged is the detail of a create whose
// required_mount_contract_version is not the gateway's (409).
type MountContractChanged struct {
	Actual   int    `json:"actual"`
	Code     string `json:"code"`
	Expected int    `json:"expected"`
}
