"""Context providers: HIDA episodic memory and the prototype pool (DMG genesis, GSR routing)."""
