package frr

import "errors"

// Errors of the renderer, the merge and the validation; match them with
// errors.Is (and *RefusedError with errors.As).
var (
	// ErrInvalidSettings is wrapped by every error of Settings.Validate.
	ErrInvalidSettings = errors.New("invalid FRR settings")
	// ErrInvalidConfig is wrapped by the errors of Render: a config that
	// cannot be rendered to FRR configuration with these settings.
	ErrInvalidConfig = errors.New("config cannot be rendered to FRR configuration")
	// ErrBaseConflict is wrapped by the errors of Merge: the operator's base
	// file defines something sluice renders, or its sluice markers are broken.
	ErrBaseConflict = errors.New("FRR base file conflicts with what sluice renders")
	// ErrNotInstalled means vtysh is not on PATH.
	ErrNotInstalled = errors.New("FRR is not installed")
	// ErrRefused is wrapped by *RefusedError: FRR's own check refused the file.
	ErrRefused = errors.New("FRR refuses the configuration")
)
