package ctxlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestMutex_ExcludesAndGivesUpWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New()
		if err := m.Lock(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		if err := m.Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held Mutex = %v, want the context's deadline", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("gave up after %v, want at its deadline (1s)", d)
		}
		got := make(chan struct{})
		go func() {
			if err := m.Lock(context.Background()); err == nil {
				close(got)
			}
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a second Lock took a held Mutex")
		default:
		}
		m.Unlock()
		<-got // taken once released
		m.Unlock()
	})
}

func TestMutex_UnlockOfUnlockedPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Unlock of an unlocked Mutex did not panic")
		}
	}()
	New().Unlock()
}
