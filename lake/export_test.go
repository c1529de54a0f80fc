package lake

// SetCrash makes the writer stop dead at a step for which crash returns
// true, as a kill -9 there would: nothing after it happens.
func (w *Writer) SetCrash(crash func(step string) bool) { w.crash = crash }

// Kill stops a feed and its writer dead, as a kill -9 would: what either
// goroutine is doing finishes, nothing after it happens.
func (f *Feed) Kill() {
	close(f.quit)
	<-f.done
	close(f.w.done)
	f.w.wg.Wait()
}
