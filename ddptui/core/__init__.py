"""The console core: no Textual here, ever."""
