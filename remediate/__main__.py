from remediate.cli import main

main()
