package bus

// Names of the node's request-reply surface: the admin API (a NATS micro
// service every node runs) and the host hooks (subjects a host process
// answers and the node asks).
//
//	service        syncnode                                 (`nats micro ls`, $SRV.*.syncnode)
//	admin          syncnode.admin.<group>.<op>              (queue group syncnode: one node answers)
//	node info      syncnode.admin.node.info                 (no queue group: every node answers)
//	scopes hook    syncnode.hook.scopes.<partition>
//	validate hook  syncnode.hook.validate.<partition>
//	token hook     syncnode.hook.token
//
// A hook subject carries the partition token so that a hook process can
// serve some tenants only (syncnode.hook.scopes.acme) and NATS permissions
// can be granted per tenant; syncnode.hook.> answers everything.
//
// These names belong to the deployment, not to a namespace (Names): an
// operator and a host reach one deployment through them, and a node in
// another namespace runs neither the admin API nor hooks.
const (
	// AdminService is the micro service name of the admin API.
	AdminService = "syncnode"
	// AdminQueueGroup load-balances admin requests across the nodes of a
	// deployment: every operation but node info reads or changes state
	// the nodes share (SQL, JetStream), so any node may answer.
	AdminQueueGroup = "syncnode"
	// SubjectAdmin matches every admin request: syncnode.admin.>.
	SubjectAdmin = adminPrefix + ">"
	// SubjectHooks matches every hook request: syncnode.hook.>.
	SubjectHooks = hookPrefix + ">"

	adminPrefix = "syncnode.admin."
	hookPrefix  = "syncnode.hook."
)

// Admin endpoints: the group and operation of syncnode.admin.<group>.<op>.
const (
	AdminNodeInfo             = "node.info"
	AdminPartitionsList       = "partitions.list"
	AdminPartitionsInfo       = "partitions.info"
	AdminPartitionsClients    = "partitions.clients"
	AdminPartitionsPrune      = "partitions.prune"
	AdminCheckpointsList      = "checkpoints.list"
	AdminCheckpointsDeclare   = "checkpoints.declare"
	AdminCheckpointsActivate  = "checkpoints.activate"
	AdminCheckpointsGate      = "checkpoints.gate"
	AdminCheckpointsRotate    = "checkpoints.rotate-epoch"
	AdminCheckpointsRepublish = "checkpoints.republish"
	AdminSegmentsStats        = "segments.stats"
	AdminSegmentsPrune        = "segments.prune"
	// Auth leases (SPEC.md §7.3): `syncnode leases revoke|clear`.
	AdminLeasesRevoke = "leases.revoke"
	AdminLeasesClear  = "leases.clear"
	// AdminReactionsGroup is the group of the reactions endpoints
	// (syncnode.admin.reactions.<op>), which package reactions registers
	// through admin.Extension.
	AdminReactionsGroup = "reactions"
	AdminReactionsList  = AdminReactionsGroup + ".list"
	AdminReactionsShow  = AdminReactionsGroup + ".show"
	AdminReactionsRetry = AdminReactionsGroup + ".retry"
	AdminReactionsPrune = AdminReactionsGroup + ".prune"
	AdminReactionsStats = AdminReactionsGroup + ".stats"
)

// AdminSubject is syncnode.admin.<endpoint>, endpoint one of the Admin*
// constants (or reactions.<op>).
func AdminSubject(endpoint string) string { return adminPrefix + endpoint }

// Hook names (the third token of syncnode.hook.<hook>…).
const (
	HookScopes   = "scopes"
	HookValidate = "validate"
	HookToken    = "token"
)

// HookScopesSubject is syncnode.hook.scopes.<partition>.
func HookScopesSubject(p Partition) string { return hookPrefix + HookScopes + "." + p.token }

// HookValidateSubject is syncnode.hook.validate.<partition>.
func HookValidateSubject(p Partition) string { return hookPrefix + HookValidate + "." + p.token }

// HookTokenSubject is syncnode.hook.token: the partition is what the
// token says, so the subject cannot carry it.
func HookTokenSubject() string { return hookPrefix + HookToken }

// HookSubjects matches every request of one hook: syncnode.hook.<hook>.>
// (for the token hook, use HookTokenSubject).
func HookSubjects(hook string) string { return hookPrefix + hook + ".>" }

// AdminEdgeStatus is a hub's edge links and replicas (every hub node
// answers: each runs its own links).
const AdminEdgeStatus = "edge.status"
