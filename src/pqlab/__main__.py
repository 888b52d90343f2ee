from pqlab.cli import main

raise SystemExit(main())
