package clock_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/state/clock"
)

func ExampleManual() {
	c := clock.NewManual(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	now := c.Now // what a state package takes
	c.Advance(90 * time.Second)
	fmt.Println(now().Format(time.TimeOnly))
	c.Set(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC))
	fmt.Println(now().Format(time.TimeOnly))
	// Output:
	// 03:05:35
	// 03:00:00
}
