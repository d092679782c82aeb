package runtime

// Transitional, until the mechanical rewrite (.surface-move.sh) renames
// App.Kill to kill and deletes this file.
func (a *App) kill() { a.Kill() }
