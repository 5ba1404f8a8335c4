module github.com/sluicehq/sluice/cmd/sluice

go 1.26.0

require github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000

replace github.com/sluicehq/sluice => ../..
