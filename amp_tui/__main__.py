from amp_tui.cli import main

raise SystemExit(main())
