from robolearn.cli import main

main()
