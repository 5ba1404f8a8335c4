package contract

// ErrCode is the code of an error answer of the configurator's API (apply,
// delete, undo, retry), carried in the micro Nats-Service-Error-Code
// header beside a one-line description. It is what a client branches on;
// pkg/apiclient returns it as apiclient.Error.Code. These five are every
// code the configurator answers with.
type ErrCode string

const (
	// ErrCodeInvalid: the request was malformed, or it or the set it would
	// make breaks a rule (the answer lists each problem); nothing was
	// stored. Sending it again changes nothing: fix it first.
	ErrCodeInvalid ErrCode = "400"
	// ErrCodeNotFound: what the request names (an intent to delete, a
	// revision to undo to, a head to retry) does not exist.
	ErrCodeNotFound ErrCode = "404"
	// ErrCodeConflict: state moved under the request, or the request does
	// not fit the state it found (another apply runs, the control plane is
	// paused, a registry owns the intent); retry, or act as it says.
	ErrCodeConflict ErrCode = "409"
	// ErrCodeStoreLost: the store is lost (pkg/storeloss): nothing is
	// started until an operator recovers.
	ErrCodeStoreLost ErrCode = "412"
	// ErrCodeUnavailable: the control plane failed; retry.
	ErrCodeUnavailable ErrCode = "503"
)
