package lake

// SetCrash makes the writer stop dead at a step for which crash returns
// true, as a kill -9 there would: nothing after it happens.
func (w *Writer) SetCrash(crash func(step string) bool) { w.crash = crash }
