package namewire

// Field numbers of meshdns.v1 (proto/meshdns/v1/*.proto): the one place
// they are written down for the code that reads and writes the protocol
// on protowire instead of the generated code, which is this package. Only
// StreamNameTableResponse's are exported: tests outside it (the control
// plane's, the supervisor's) and the drift test name them. TestDescriptorDrift
// checks every field of the generated descriptors against what this package
// decodes and encodes.
const (
	// fieldNameTable* number NameTable's fields, fieldMapKey and
	// fieldMapValue those of a map entry.
	fieldNameTableTable    = 1 // NameTable.table, map<string, NameInfo>
	fieldNameTableZones    = 2 // NameTable.authoritative_zones
	fieldNameTableSettings = 3 // NameTable.settings

	fieldMapKey   = 1 // a map entry's key
	fieldMapValue = 2 // a map entry's value

	fieldInfoIPs       = 1
	fieldInfoRegistry  = 2
	fieldInfoShortname = 3
	fieldInfoNamespace = 4
	fieldInfoAltHosts  = 5
	fieldInfoPorts     = 6
	fieldInfoEndpoints = 7
	fieldInfoCanonical = 8
	fieldInfoTTL       = 9

	fieldPortName     = 1
	fieldPortPort     = 2
	fieldPortProtocol = 3

	fieldEndpointHostname = 1
	fieldEndpointIPs      = 2
	fieldEndpointZone     = 3
	fieldEndpointForZones = 4
)

// The stream's messages (discovery.proto).
const (
	fieldIdentityPod       = 1
	fieldIdentityNamespace = 2
	fieldIdentityDomain    = 3
	fieldIdentityInstance  = 4
	fieldIdentityVersion   = 5
	fieldIdentityFeatures  = 6

	// fieldRequestIdentity, fieldRequestVersion, fieldRequestNonce,
	// fieldRequestError, fieldRequestFailing and fieldRequestRejected number
	// StreamNameTableRequest's fields (Answer.Decode reads them).
	fieldRequestIdentity = 1
	fieldRequestVersion  = 2
	fieldRequestNonce    = 3
	fieldRequestError    = 4
	fieldRequestFailing  = 5
	fieldRequestRejected = 6

	fieldErrorCode    = 1
	fieldErrorMessage = 2

	fieldFailingWindow = 1 // FailingNames.window_seconds
	fieldFailingNames  = 2 // FailingNames.names

	fieldFailingName  = 1 // FailingName.name
	fieldFailingRcode = 2
	fieldFailingCount = 3

	// FieldResponseVersion, FieldResponseNonce, FieldResponseFull and
	// FieldResponseDelta number StreamNameTableResponse's fields
	// (ReadResponse takes a response from the stream field by field: a
	// full table goes to a file, not into memory).
	FieldResponseVersion = 1
	FieldResponseNonce   = 2
	FieldResponseFull    = 3
	FieldResponseDelta   = 4

	// fieldDelta* number NameTableDelta's fields, fieldZoneSetZones
	// ZoneSet's one.
	fieldDeltaBase     = 1
	fieldDeltaUpserted = 2
	fieldDeltaRemoved  = 3
	fieldDeltaZones    = 4
	fieldDeltaSettings = 5

	fieldZoneSetZones = 1
)

// AgentSettings and the messages inside it (settings.proto).
const (
	fieldSettingsPolicy     = 1
	fieldSettingsForwarding = 2
	fieldSettingsTelemetry  = 3
	fieldSettingsPodZone    = 4
	fieldSettingsRequires   = 5

	fieldPolicyRules          = 1
	fieldPolicyOutsideDefault = 2
	fieldPolicyTableDefault   = 3
	fieldPolicyDenyResponse   = 4
	fieldPolicyMode           = 5
	fieldPolicySource         = 6

	fieldRulePattern = 1
	fieldRuleAction  = 2
	fieldRuleSource  = 3

	fieldForwardDomains   = 1
	fieldForwardUpstreams = 2
	fieldForwardSource    = 3

	fieldTelemetryQueryLog = 1
	fieldTelemetryFailing  = 2

	fieldQueryLogClasses      = 1
	fieldQueryLogSampleEvery  = 2
	fieldQueryLogMaxPerSecond = 3

	fieldReportEnabled = 1
	fieldReportTopN    = 2
	fieldReportWindow  = 3
)
